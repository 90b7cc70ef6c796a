"""Replacing PyG's objects and putting them back.

PyG imports its functions by name (``from torch_geometric.utils import
scatter`` in some sixty modules), so replacing ``torch_geometric.utils.scatter``
alone would miss most callers. :func:`swap_everywhere` replaces every module
global that *is* the original object, in every loaded module (PyG's, its
generated ``propagate`` modules, the user's), and swapping back the same way
also restores modules imported while the backend was on. Attributes are
set through :class:`Log`, which remembers what each one held.

Every replacement is made by :func:`wrapper`, which TorchScript sees
through: a scripted or traced model runs PyG's own code.
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any, Callable

import torch

_ABSENT = object()


def swap_everywhere(pairs: dict[int, Any]) -> int:
    """Sets every module global whose value's id is a key of ``pairs`` (and
    is that object) to the paired value; returns how many it set."""
    count = 0
    for module in list(sys.modules.values()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for name, value in list(namespace.items()):
            new = pairs.get(id(value), _ABSENT)
            if new is not _ABSENT:
                namespace[name] = new
                count += 1
    return count


def wrapper(original: Callable, call: Callable) -> Callable:
    """A function running ``call(original, *args, **kwargs)`` that looks like
    ``original``: its name, docstring and (through ``__wrapped__``) signature
    and source, and its module globals. TorchScript compiles a function from
    the source ``inspect`` finds, the original's, and resolves its names in
    the function's globals and closure, so it compiles ``original`` as PyG
    wrote it; the body below reads only its closure for that reason. Under
    ``torch.jit.trace`` it runs ``original`` too: a trace records a custom
    op's integer arguments (an output size) as constants."""
    is_tracing = torch.jit.is_tracing

    def forward(*args, **kwargs):
        if is_tracing():
            return original(*args, **kwargs)
        return call(original, *args, **kwargs)

    function = types.FunctionType(forward.__code__, original.__globals__, original.__name__, None,
                                  forward.__closure__)
    return functools.update_wrapper(function, original)


class Log:
    """Attributes (of classes, modules, ``torch.ops`` namespaces) set by the
    backend, with what they held before."""

    def __init__(self) -> None:
        self._entries: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        """``owner.name = value``, remembering the attribute ``owner`` defined itself."""
        self._entries.append((owner, name, vars(owner).get(name, _ABSENT)))
        setattr(owner, name, value)

    def restore(self) -> None:
        """Every attribute back as it was, the latest set undone first."""
        for owner, name, old in reversed(self._entries):
            if old is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._entries.clear()
