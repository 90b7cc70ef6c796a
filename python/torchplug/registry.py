"""The Python view of the C++ registry (``torchplug::core::Registry``)."""

from __future__ import annotations

from dataclasses import dataclass

from . import _C


@dataclass(frozen=True)
class OpInfo:
    """One registered op, as the C++ registry describes it."""

    name: str  #: callable as ``torch.ops.torchplug.<name>``
    schema: str
    plugin: str  #: the folder the op lives in
    backends: tuple[str, ...]  #: dispatch keys with a kernel, e.g. ("CPU", "CUDA", "Meta")
    differentiable: bool  #: an autograd kernel is registered
    dtypes: tuple[str, ...]
    doc: str


def registry() -> list[OpInfo]:
    """Every op registered by the loaded plugins, in registration order."""
    return [
        OpInfo(
            name=op["name"],
            schema=op["schema"],
            plugin=op["plugin"],
            backends=tuple(op["backends"]),
            differentiable=op["differentiable"],
            dtypes=tuple(op["dtypes"]),
            doc=op["doc"],
        )
        for op in _C.registry()
    ]
