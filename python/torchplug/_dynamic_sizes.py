"""Output sizes read off the data, under torch.compile.

An op whose schema has ``SymInt? dim_size=None`` sizes its output by the index
values when ``dim_size`` is None (``max + 1``). Its C++ Meta kernel cannot make
that size up, so it asks for ``dim_size``. Under FakeTensorMode (torch.compile,
torch.export, opcheck) the size becomes an unbacked symbol instead, bound when
the real op runs: each such op's Meta kernel is wrapped by a fake kernel that
passes ``ctx.new_dynamic_size()`` for a missing ``dim_size`` and calls the C++
kernel for the rest (its checks and its outputs, which share the one symbol).
C++ callers keep the Meta kernel as it is.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_wrapped: set[str] = set()


def _needs_dynamic_size(schema: torch._C.FunctionSchema) -> int:
    """The position of an optional SymInt ``dim_size`` argument, or -1."""
    if "SymInt? dim_size" not in str(schema):
        return -1
    return [argument.name for argument in schema.arguments].index("dim_size")


def _wrap(qualname: str, position: int) -> None:
    meta = torch.library.get_kernel(qualname, "Meta")

    def fake(*args, **kwargs):
        # Plain meta tensors (no fake mode, no shape environment) keep the C++
        # kernel's own answer: dim_size is required.
        if isinstance(args[0], FakeTensor):
            if len(args) > position:
                if args[position] is None:
                    args = (*args[:position], torch.library.get_ctx().new_dynamic_size(), *args[position + 1:])
            elif kwargs.get("dim_size") is None:
                kwargs = {**kwargs, "dim_size": torch.library.get_ctx().new_dynamic_size()}
        return meta.call_boxed(_META, *args, **kwargs)

    torch.library.register_fake(qualname, fake, allow_override=True)


def register_dynamic_sizes() -> None:
    """Wraps every registered op that takes ``dim_size`` (once each)."""
    from .registry import registry

    for info in registry():
        qualname = info.qualified_name
        if qualname in _wrapped or "Meta" not in info.backends:
            continue
        base, _, overload = info.name.partition(".")
        schema = getattr(getattr(getattr(torch.ops, info.namespace), base), overload or "default")._schema
        position = _needs_dynamic_size(schema)
        if position >= 0:
            _wrap(qualname, position)
            _wrapped.add(qualname)
