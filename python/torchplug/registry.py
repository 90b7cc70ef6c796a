"""The Python view of the C++ registry (``torchplug::core::Registry``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _C


@dataclass(frozen=True)
class OpInfo:
    """One registered op, as the C++ registry describes it."""

    namespace: str  #: "torchplug" for the built-in ops, a plugin's own otherwise
    name: str  #: callable as ``torch.ops.<namespace>.<name>``
    schema: str
    plugin: str  #: the plugin (library) that defines it
    backends: tuple[str, ...]  #: dispatch keys with a kernel, e.g. ("CPU", "CUDA", "Meta")
    differentiable: bool  #: an autograd kernel is registered
    dtypes: tuple[str, ...]
    doc: str

    @property
    def qualified_name(self) -> str:
        """``"<namespace>::<name>"``, as ``torch.library`` spells it."""
        return f"{self.namespace}::{self.name}"

    @property
    def op(self) -> torch._ops.OpOverloadPacket:
        """The dispatcher op, ``torch.ops.<namespace>.<name>``."""
        return getattr(getattr(torch.ops, self.namespace), self.name.split(".")[0])


def registry() -> list[OpInfo]:
    """Every op registered by the loaded plugins, in registration order."""
    return [
        OpInfo(
            namespace=op["namespace"],
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
