"""The reductions table (torchplug._reductions): the functions that take a
reduction by name accept exactly the table's names (aliases included) for
which their family registered ops, under eager, TorchScript and
torch.compile."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

import torchplug
from torchplug._reductions import REDUCTIONS, implemented

# (the by-name function, its family's per-reduction template, a call of it on
# (src [6, 3], reduce) as a user makes it)
BY_NAME_FUNCTIONS: dict[str, tuple[str, Callable]] = {
    "scatter": ("scatter_{}", lambda src, reduce: torchplug.scatter(src, INDEX, 0, dim_size=4, reduce=reduce)),
    "segment_csr": ("segment_{}_csr", lambda src, reduce: torchplug.segment_csr(src, INDPTR, reduce=reduce)),
    "segment_coo": ("segment_{}_coo", lambda src, reduce: torchplug.segment_coo(src, INDEX.sort().values,
                                                                                 dim_size=4, reduce=reduce)),
    "spmm": ("spmm_{}", lambda src, reduce: torchplug.spmm((INDPTR, INDEX, None), src, reduce)),
}
INDEX = torch.tensor([0, 2, 1, 0, 3, 2])
INDPTR = torch.tensor([0, 2, 2, 5, 6])


def _schemas() -> dict[str, str]:
    return {info.name: info.schema for info in torchplug.registry() if info.namespace == "torchplug"}


@pytest.mark.parametrize("name", sorted(BY_NAME_FUNCTIONS))
def test_by_name_takes_every_registered_reduction(name: str) -> None:
    """Each reduction with a registered op (and its aliases) gives that op's
    values, and the op returns an arg exactly where the table says; the other
    names raise ValueError naming the function and the argument."""
    template, call = BY_NAME_FUNCTIONS[name]
    src = torch.randn(6, 3)
    schemas = _schemas()
    assert implemented(vars(torchplug), template) == tuple(r for r in REDUCTIONS if template.format(r.name) in schemas)
    for r in REDUCTIONS:
        op = template.format(r.name)
        if op not in schemas:
            with pytest.raises(ValueError, match=f"torchplug.{name}: argument 'reduce' must be one of"):
                call(src, r.name)
            continue
        assert schemas[op].endswith("-> (Tensor, Tensor)") == r.arg, schemas[op]
        want = call(src, r.name)
        assert isinstance(want, torch.Tensor)
        for alias in r.aliases:
            torch.testing.assert_close(call(src, alias), want, rtol=0, atol=0)


@pytest.mark.parametrize("reduce", [r.name for r in REDUCTIONS] + [a for r in REDUCTIONS for a in r.aliases])
def test_by_name_scripts_and_compiles_without_graph_breaks(reduce: str) -> None:
    """The generated functions are TorchScript-able (their source is in
    linecache) and trace whole under torch.compile(fullgraph=True)."""
    src = torch.randn(6, 3)
    scripted = torch.jit.script(torchplug.segment_csr)
    torch.testing.assert_close(scripted(src, INDPTR, None, reduce), torchplug.segment_csr(src, INDPTR, reduce=reduce),
                               rtol=0, atol=0)
    torch._dynamo.reset()
    compiled = torch.compile(lambda s: torchplug.scatter(s, INDEX, 0, dim_size=4, reduce=reduce),
                             backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(src), torchplug.scatter(src, INDEX, 0, dim_size=4, reduce=reduce),
                               rtol=0, atol=0)
