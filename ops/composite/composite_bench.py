"""The composites' benchmark workloads: softmax (forward, and forward plus
backward), logsumexp and std against plain PyTorch, torch_geometric's
softmax and torch_scatter's composites where installed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug
from torchplug.bench.candidates import TORCHPLUG, Candidate, Lineup, torch_scatter
from torchplug.bench.workloads import (ScatterInputs, Scale, count_label, draw_index, dtype_label, index_label,
                                       largest_row)

try:
    from torch_geometric.utils import softmax as pyg_softmax
except ImportError:
    pyg_softmax = None


@dataclass(frozen=True)
class CompositeWorkload:
    """A composite over ``E x F`` rows of ``src`` grouped into ``N`` by an
    index along dim 0 (uniformly random or Chung-Lu power-law of ``exponent``,
    sorted if asked): ``softmax`` (GAT's per-node
    attention, F heads), ``softmax_fwbw`` (forward plus backward), ``logsumexp``
    or ``std``."""

    op: ClassVar[str] = "composite"
    kind: str
    e: int
    f: int
    n: int
    sorted_index: bool = False
    dtype: torch.dtype = torch.float32
    exponent: float | None = None

    @property
    def name(self) -> str:
        """Table label, e.g. ``scatter_softmax fw+bw E=10M F=8 N=1M random float32``."""
        op = "scatter_softmax fw+bw" if self.kind == "softmax_fwbw" else f"scatter_{self.kind}"
        order = index_label(self.exponent, self.sorted_index)
        return f"{op} E={count_label(self.e)} F={self.f} N={count_label(self.n)} {order} {dtype_label(self.dtype)}"

    @property
    def terms_per_output(self) -> float:
        return largest_row(self.n, self.e, self.exponent)

    def min_bytes(self) -> int:
        """softmax: read src and the index, write out; forward plus backward
        also reads the gradient and the output and writes the src gradient;
        logsumexp and std read src and the index and write N x F."""
        rows = self.dtype.itemsize * self.e * self.f
        if self.kind == "softmax":
            return 2 * rows + 8 * self.e
        if self.kind == "softmax_fwbw":
            return 5 * rows + 16 * self.e
        return rows + 8 * self.e + self.dtype.itemsize * self.n * self.f

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        return {"kind": self.kind, "E": self.e, "F": self.f, "N": self.n,
                "index": index_label(self.exponent, self.sorted_index), "dtype": dtype_label(self.dtype)}

    def make_inputs(self, device: torch.device) -> ScatterInputs:
        """Random ``src`` and index (every group likely non-empty), sorted if asked."""
        src = torch.randn(self.e, self.f, device=device, dtype=self.dtype)
        index = draw_index(self.n, self.e, device, self.exponent)
        if self.sorted_index:
            index = index.sort().values
        return ScatterInputs(src, index, 0)

    def lineup(self, device: torch.device) -> Lineup:
        return _composite_lineup(self, device)



def _composite_lineup(workload: CompositeWorkload, device: torch.device) -> Lineup:
    """The composites against plain PyTorch (scatter_reduce amax, index_add_,
    index_select), torch_geometric.utils.softmax and torch_scatter's composites
    where installed."""
    x = workload.make_inputs(device)
    src, index, n, f = x.src, x.index, workload.n, workload.f
    expanded = index.view(-1, 1).expand_as(src)
    kind = workload.kind

    def plain_softmax(s: Tensor) -> Tensor:
        top = s.new_empty(n, f).scatter_reduce_(0, expanded, s, "amax", include_self=False)
        e = (s - top.index_select(0, index)).exp()
        return e / s.new_zeros(n, f).index_add_(0, index, e).index_select(0, index)

    if kind in ("softmax", "softmax_fwbw"):
        forwards = {TORCHPLUG: lambda s: torchplug.scatter_softmax(s, index, 0, n),
                    "plain PyTorch": plain_softmax}
        if pyg_softmax is not None:
            forwards["torch_geometric softmax"] = lambda s: pyg_softmax(s, index, num_nodes=n)
        if torch_scatter is not None:
            forwards["torch_scatter"] = lambda s: torch_scatter.composite.scatter_softmax(s, index, 0, dim_size=n)
        if kind == "softmax":
            candidates = tuple(Candidate(name, lambda fn=fn: fn(src)) for name, fn in forwards.items())
        else:
            leaf = src.detach().requires_grad_()
            grad_out = torch.randn_like(src)
            candidates = tuple(Candidate(name, lambda fn=fn: torch.autograd.grad(fn(leaf), leaf, grad_out)[0])
                               for name, fn in forwards.items())
        return Lineup(candidates, reference="plain PyTorch")

    def plain_logsumexp() -> Tensor:  # an empty group: log(0) - inf, 0 as torch_scatter gives
        top = src.new_full((n, f), float("-inf")).scatter_reduce_(0, expanded, src, "amax")
        e = (src - top.index_select(0, index)).exp()
        return (src.new_zeros(n, f).index_add_(0, index, e).log_() + top).nan_to_num_(neginf=0.0)

    def plain_std() -> Tensor:
        count = src.new_zeros(n).index_add_(0, index, src.new_ones(index.numel())).clamp_(min=1).view(-1, 1)
        mean = src.new_zeros(n, f).index_add_(0, index, src) / count
        deviation = (src - mean.index_select(0, index)).square_()
        return (src.new_zeros(n, f).index_add_(0, index, deviation) / (count - 1).clamp_(min=1)).sqrt_()

    if kind == "logsumexp":
        candidates = [Candidate(TORCHPLUG, lambda: torchplug.scatter_logsumexp(src, index, 0, dim_size=n)),
                      Candidate("plain PyTorch", plain_logsumexp)]
        if torch_scatter is not None:
            candidates.append(Candidate("torch_scatter",
                                        lambda: torch_scatter.composite.scatter_logsumexp(src, index, 0, dim_size=n)))
    else:
        candidates = [Candidate(TORCHPLUG, lambda: torchplug.scatter_std(src, index, 0, dim_size=n)),
                      Candidate("plain PyTorch", plain_std)]
        if torch_scatter is not None:
            candidates.append(Candidate("torch_scatter",
                                        lambda: torch_scatter.composite.scatter_std(src, index, 0, dim_size=n)))
    return Lineup(tuple(candidates), reference="plain PyTorch")


def workloads(scale: Scale) -> tuple[CompositeWorkload, ...]:
    """Softmax over GAT's 8 heads (random and sorted index on a GPU),
    forward and forward plus backward; logsumexp (GPU) and std."""
    if scale.gpu:
        m = 1_000_000
        return (
            *(CompositeWorkload(kind, 10 * m, 8, m, sorted_index=s)
              for kind in ("softmax", "softmax_fwbw") for s in (False, True)),
            *(CompositeWorkload(kind, 10 * m, 64, m) for kind in ("logsumexp", "std")),
            *(CompositeWorkload(kind, 10 * m, 8, m, exponent=2.5) for kind in ("softmax", "softmax_fwbw")),
        )
    return (
        *(CompositeWorkload(kind, scale.e, 8, scale.n) for kind in ("softmax", "softmax_fwbw")),
        CompositeWorkload("std", scale.e, 16, scale.n),
        CompositeWorkload("softmax_fwbw", scale.e, 8, scale.n, exponent=2.5),
    )
