"""spmm's benchmark workloads: spmm_<reduce> (and its backward) against
torch.sparse.mm and index_select followed by a native scatter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug
from torchplug._reductions import BY_NAME
from torchplug.bench.candidates import TORCHPLUG, Candidate, Lineup
from torchplug.bench.workloads import Scale, count_label, degrees_label, draw_index, dtype_label, largest_row


@dataclass(frozen=True)
class SpmmInputs:
    """A CSR adjacency (``rowptr [N + 1]``, ``col [E]``, ``value [E]``), the
    same as a ``torch.sparse_csr_tensor`` and as COO rows, and ``x [N, F]``."""

    rowptr: Tensor
    col: Tensor
    value: Tensor
    adj: Tensor
    row: Tensor
    x: Tensor


@dataclass(frozen=True)
class SpmmWorkload:
    """``spmm_<reduce>`` of an ``N x N`` adjacency with ``E`` edges (random
    columns; rows uniform, or Chung-Lu power-law degrees of ``exponent``) and
    ``x [N, F]``; ``backward``: the sum forward plus x's gradient, and with
    ``value_grad`` value's too."""

    op: ClassVar[str] = "spmm"
    e: int
    f: int
    n: int
    reduce: str = "sum"
    exponent: float | None = None
    backward: bool = False
    dtype: torch.dtype = torch.float32
    value_grad: bool = False

    @property
    def name(self) -> str:
        """Table label, e.g. ``spmm_sum E=10M F=64 N=1M uniform float32``."""
        op = f"spmm_{self.reduce}" + (" fw+bw" if self.backward else "") + (" (x, value)" if self.value_grad else "")
        degrees = degrees_label(self.exponent)
        return f"{op} E={count_label(self.e)} F={self.f} N={count_label(self.n)} {degrees} {dtype_label(self.dtype)}"

    @property
    def terms_per_output(self) -> float:
        return largest_row(self.n, self.e, self.exponent)

    def min_bytes(self) -> int:
        """Gather x once per edge (E x F), read col and value, write N x F;
        backward as much again for x's gradient (over the transpose) and for
        value's (x gathered per edge again, the output's gradient read)."""
        once = self.dtype.itemsize * (self.e + self.n) * self.f + 12 * self.e
        return (1 + self.backward + self.value_grad) * once

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        return {"E": self.e, "F": self.f, "N": self.n, "reduce": self.reduce,
                "degrees": degrees_label(self.exponent), "backward": self.backward,
                "value_grad": self.value_grad, "dtype": dtype_label(self.dtype)}

    def make_inputs(self, device: torch.device) -> SpmmInputs:
        row = draw_index(self.n, self.e, device, self.exponent).sort().values
        col = torch.randint(0, self.n, (self.e,), device=device)
        value = torch.rand(self.e, device=device, dtype=self.dtype)
        rowptr = torch.cat([row.new_zeros(1), torch.bincount(row, minlength=self.n).cumsum(0)])
        adj = torch.sparse_csr_tensor(rowptr, col, value, (self.n, self.n))
        x = torch.randn(self.n, self.f, device=device, dtype=self.dtype)
        return SpmmInputs(rowptr, col, value, adj, row, x)

    def lineup(self, device: torch.device) -> Lineup:
        return _spmm_lineup(self, device)



def _sparse_mm_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype torch.sparse.mm is compared in: the workload's where it
    takes a CSR of that dtype on the device, else float32 (named so)."""
    adj = torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1, dtype=dtype), (1, 1))
    try:
        torch.sparse.mm(adj.to(device), torch.ones(1, 8, dtype=dtype, device=device))
    except RuntimeError:
        return torch.float32
    return dtype


def _spmm_lineup(workload: SpmmWorkload, device: torch.device) -> Lineup:
    """spmm against torch.sparse.mm on the CSR tensor (cuSPARSE on CUDA; sum
    only; in float32 where it takes no CSR of the workload's dtype) and
    index_select followed by the best native scatter (index_add_,
    scatter_reduce_). fw+bw rows also time torchplug with the transpose built
    once beforehand (spmm_transpose), as a training loop would."""
    x_in = workload.make_inputs(device)
    rowptr, col, value, adj, row, x = x_in.rowptr, x_in.col, x_in.value, x_in.adj, x_in.row, x_in.x
    n, f, reduce = workload.n, workload.f, workload.reduce
    expanded = row.view(-1, 1).expand(-1, f)

    def gathered(xs: Tensor, v: Tensor) -> Tensor:
        messages = xs.index_select(0, col) * v.view(-1, 1)
        if reduce == "sum":
            return xs.new_zeros(n, f).index_add_(0, row, messages)
        return xs.new_zeros(n, f).scatter_reduce_(0, expanded, messages, BY_NAME[reduce].native,
                                                  include_self=False)

    def ours(xs: Tensor, v: Tensor) -> Tensor:
        return torchplug.spmm((rowptr, col, v), xs, reduce)

    forwards = {TORCHPLUG: ours, "index_select + scatter": gathered}
    if reduce == "sum":
        mm_dtype = _sparse_mm_dtype(workload.dtype, device)
        if mm_dtype == workload.dtype:
            forwards["torch.sparse.mm"] = lambda xs, v: torch.sparse.mm(
                torch.sparse_csr_tensor(rowptr, col, v, (n, n)), xs)
        elif not workload.backward:
            x32, v32 = x.float(), value.float()
            forwards["torch.sparse.mm (float32)"] = lambda xs, v: torch.sparse.mm(
                torch.sparse_csr_tensor(rowptr, col, v32, (n, n)), x32).to(workload.dtype)
    if not workload.backward:
        candidates = tuple(Candidate(name, lambda fn=fn: fn(x, value)) for name, fn in forwards.items())
        return Lineup(candidates, reference="index_select + scatter")
    transpose = torchplug.spmm_transpose(rowptr, col, n)
    forwards["torchplug, transpose cached"] = lambda xs, v: torchplug.spmm((rowptr, col, v), xs, reduce,
                                                                           transpose=transpose)
    leaf_x = x.detach().requires_grad_()
    grad_out = torch.randn(n, f, device=device, dtype=x.dtype)
    if workload.value_grad:
        # Both gradients, value's compared (torch.sparse.mm's gradient of the
        # CSR values densifies the adjacency: N x N).
        forwards.pop("torch.sparse.mm", None)
        leaf_value = value.detach().requires_grad_()

        def both_of(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[], Tensor]:
            def run() -> Tensor:
                return torch.autograd.grad(fn(leaf_x, leaf_value), (leaf_x, leaf_value), grad_out)[1]
            return run

        candidates = tuple(Candidate(name, both_of(fn)) for name, fn in forwards.items())
        return Lineup(candidates, reference="index_select + scatter")

    # x's gradient alone, for the same reason.
    def backward_of(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[], Tensor]:
        def run() -> Tensor:
            return torch.autograd.grad(fn(leaf_x, value), leaf_x, grad_out)[0]
        return run

    candidates = tuple(Candidate(name, backward_of(fn)) for name, fn in forwards.items())
    return Lineup(candidates, reference="index_select + scatter")


def workloads(scale: Scale) -> tuple[SpmmWorkload, ...]:
    """On a GPU: uniform and power-law degrees at three widths, every
    reduction, the backward (x's gradient, and value's too), half types; on
    a CPU: sum, mean and max at F = 16."""
    if scale.gpu:
        m = 1_000_000
        return (
            *(SpmmWorkload(e, f, n, exponent=exponent) for e, f, n in ((10 * m, 64, m), (4 * m, 256, 200_000),
                                                                       (20 * m, 16, 2 * m))
              for exponent in (None, 2.0, 2.5)),
            *(SpmmWorkload(e, f, n, reduce=r) for e, f, n in ((10 * m, 64, m), (4 * m, 256, 200_000))
              for r in ("mean", "min", "max")),
            *(SpmmWorkload(e, f, n, backward=True) for e, f, n in ((10 * m, 64, m), (4 * m, 256, 200_000))),
            *(SpmmWorkload(10 * m, 64, m, dtype=d) for d in (torch.float16, torch.bfloat16)),
            *(SpmmWorkload(10 * m, 64, m, backward=True, value_grad=True, dtype=d) for d in (torch.float32,
                                                                                            torch.bfloat16)),
        )
    return (*(SpmmWorkload(scale.e, 16, scale.n, reduce=r) for r in ("sum", "mean", "max")),
            SpmmWorkload(scale.e, 16, scale.n, exponent=2.5))
