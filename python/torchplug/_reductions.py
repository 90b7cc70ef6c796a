"""The reductions, from the one table the C++ side defines
(``core/reduce/policy.h``, through ``torchplug._C.reductions()``), for every
Python caller: the friendly functions' ``reduce=`` (scatter, segment, spmm),
the bench and the tests.

A family implements a reduction by defining its function for it, named by a
template (``"scatter_{}"`` gives ``scatter_max``); :func:`by_name` then
writes the family's function that takes the reduction by name. TorchScript
reads no tuple, list or dict globals and has no function values, so that
function cannot look its op up at run time: it is generated from this table,
one plain ``if`` per reduction, and stays scriptable and free of graph breaks
under ``torch.compile``.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import Callable, Optional

from . import _C


@dataclass(frozen=True)
class Reduction:
    """One reduction: its name, the other names it answers to, whether its
    ops also return an int64 arg (the position of the chosen source), and
    its name in ``torch.Tensor.scatter_reduce_`` (for the references and the
    bench's baselines)."""

    name: str
    native: str
    aliases: tuple[str, ...] = ()
    arg: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The name, then its aliases."""
        return (self.name,) + self.aliases


#: PyTorch's name of each reduction, for the references and the bench's baselines.
_NATIVE = {"sum": "sum", "mean": "mean", "mul": "prod", "min": "amin", "max": "amax"}

#: The C++ table (core/reduce/policy.h), which the C++ API's reduce= reads too.
REDUCTIONS: tuple[Reduction, ...] = tuple(
    Reduction(r["name"], _NATIVE[r["name"]], aliases=tuple(r["aliases"]), arg=r["arg"]) for r in _C.reductions()
)

#: The reductions by name, aliases included.
BY_NAME: dict[str, Reduction] = {name: r for r in REDUCTIONS for name in r.names}


def implemented(namespace: dict, template: str) -> tuple[Reduction, ...]:
    """The reductions for which ``namespace`` defines ``template.format(name)``, in table order."""
    return tuple(r for r in REDUCTIONS if template.format(r.name) in namespace)


def by_name(namespace: dict, name: str, template: str, params: str, args: str, doc: str,
            caller: Optional[str] = None) -> Callable:
    """Defines ``name(params, reduce: str = "sum") -> Tensor`` in ``namespace``
    (the family module's globals, so that its annotations and calls resolve
    as the module's own) and returns it: it calls ``template.format(r)(args)``
    for the reduction ``r`` named ``reduce`` (values only for those with an
    arg) and raises ``ValueError`` naming ``caller`` (``torchplug.<name>`` by
    default) for any other name. Its source is registered with ``linecache``,
    where TorchScript reads it."""
    caller = caller or f"torchplug.{name}"
    reductions = implemented(namespace, template)
    accepted = ", ".join(f"'{n}'" for r in reductions for n in r.names)
    lines = [f'def {name}({params}, reduce: str = "sum") -> Tensor:']
    for r in reductions:
        test = " or ".join(f'reduce == "{n}"' for n in r.names)
        lines += [f"    if {test}:", f"        return {template.format(r.name)}({args}){'[0]' if r.arg else ''}"]
    lines.append(f"    raise ValueError(\"{caller}: argument 'reduce' must be one of {accepted}, got '\" "
                 "+ reduce + \"'\")")
    source = "\n".join(lines) + "\n"
    filename = f"<torchplug reductions: {caller}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)
    function = namespace[name]
    function.__doc__ = doc
    return function
