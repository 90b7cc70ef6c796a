"""What each workload runs: torchplug and what a user would call instead.

Every candidate is a call that allocates its output the way a user would
(``torch.zeros(N, F).index_add_(...)``) and returns it. Inputs a user would
keep between calls (the expanded index, segment lengths) are built here,
outside the timed call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

import torchplug

from .workloads import (AddWorkload, CompositeWorkload, ScatterWorkload, SegmentWorkload, SpmmWorkload,
                        Workload)

try:
    import torch_scatter
except ImportError:
    torch_scatter = None

try:
    from torch_geometric.utils import softmax as pyg_softmax
except ImportError:
    pyg_softmax = None

#: The candidate the ratios are taken against.
TORCHPLUG = "torchplug"

#: torchplug with checked mode on: its ratio is what the checks cost.
CHECKED = "torchplug checked"
#: torchplug under torch.use_deterministic_algorithms(True) (CUDA only).
DETERMINISTIC = "torchplug deterministic"

_EXPANDED = "expanded index prebuilt (stride-0 view)"
_LENGTHS = "given segment lengths (prebuilt)"


@dataclass(frozen=True)
class Candidate:
    """One implementation of a workload."""

    name: str
    fn: Callable[[], Tensor]  #: allocates, computes and returns the output
    note: str = ""


@dataclass(frozen=True)
class Lineup:
    """torchplug first (then, on CUDA, torchplug in checked mode), then the baselines.

    ``reference`` names the baseline whose output every candidate must match.
    """

    candidates: tuple[Candidate, ...]
    reference: str


def _deterministic(call: Callable[[], Tensor]) -> Callable[[], Tensor]:
    """``call`` in deterministic mode, restored afterwards."""

    def run() -> Tensor:
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            return call()
        finally:
            torch.use_deterministic_algorithms(before)

    return run


def _checked(call: Callable[[], Tensor]) -> Callable[[], Tensor]:
    """``call`` with checked mode on, restored afterwards."""

    def run() -> Tensor:
        with torchplug.checked():
            return call()

    return run


# scatter_reduce_'s name for each reduction.
_NATIVE = {"sum": "sum", "mean": "mean", "mul": "prod", "min": "amin", "max": "amax"}


def _scatter_lineup(workload: ScatterWorkload, device: torch.device) -> Lineup:
    """torchplug.scatter_<reduce> against index_add_ and scatter_add_ (sum),
    scatter_reduce_ and index_reduce_ (the others), segment_reduce (sum over
    a sorted index) and torch_scatter (when installed)."""
    x = workload.make_inputs(device)
    src, index, n, dim, reduce = x.src, x.index, workload.n, x.dim, workload.reduce
    out_shape = (src.size(0), n) if workload.last_dim else (n, src.size(1))

    def zeros() -> Tensor:  # ones for a product: an empty slot holds 1
        return src.new_ones(out_shape) if reduce == "mul" else src.new_zeros(out_shape)

    expanded = (index.view(1, -1) if workload.last_dim else index.view(-1, 1)).expand_as(src)
    scatter_op = getattr(torchplug, "scatter_" + reduce)

    def ours() -> Tensor:  # min and max also compute their arg; the values are compared
        result = scatter_op(src, index, dim, dim_size=n)
        return result[0] if isinstance(result, tuple) else result

    candidates = [Candidate(TORCHPLUG, ours)]
    if device.type == "cuda":  # CPU kernels always validate the index
        candidates.append(
            Candidate(
                CHECKED,
                _checked(ours),
                "checked mode: index validated first (torchplug.set_checks)",
            )
        )
        candidates.append(
            Candidate(
                DETERMINISTIC,
                _deterministic(ours),
                "torch.use_deterministic_algorithms(True): no float atomics, same bits every run",
            )
        )
    native = _NATIVE[reduce]
    if reduce == "sum":
        candidates += [
            Candidate("index_add_", lambda: zeros().index_add_(dim, index, src)),
            Candidate("scatter_add_", lambda: zeros().scatter_add_(dim, expanded, src), _EXPANDED),
        ]
    else:
        candidates.append(
            Candidate("index_reduce_",
                      lambda: zeros().index_reduce_(dim, index, src, native, include_self=False))
        )
    candidates.append(
        Candidate(
            "scatter_reduce_",
            lambda: zeros().scatter_reduce_(dim, expanded, src, native, include_self=reduce == "sum"),
            _EXPANDED,
        )
    )
    # segment_reduce leaves an empty segment at NaN (mean) or -inf (max), not 0.
    if workload.sorted_index and reduce == "sum" and not workload.last_dim:
        lengths = torch.bincount(index, minlength=n)
        candidates.append(
            Candidate(
                "segment_reduce",
                lambda: torch.segment_reduce(src, "sum", lengths=lengths, axis=0),
                _LENGTHS,
            )
        )
    if torch_scatter is not None:
        candidates.append(
            Candidate(
                "torch_scatter",
                lambda: torch_scatter.scatter(src, index, dim=dim, dim_size=n, reduce=reduce),
            )
        )
    return Lineup(tuple(candidates), reference="index_add_" if reduce == "sum" else "scatter_reduce_")


def _segment_lineup(workload: SegmentWorkload, device: torch.device) -> Lineup:
    """segment_<reduce>_csr/coo against torch.segment_reduce (lengths or
    offsets given) and index_reduce_/index_add_; gather_csr/coo against
    repeat_interleave and index_select; scatter_sum forward plus backward
    against scatter_add and index_add through autograd; torch_scatter when
    installed."""
    x = workload.make_inputs(device)
    src, index, indptr, lengths, n, reduce = x.src, x.index, x.indptr, x.lengths, workload.n, workload.reduce
    e = workload.e
    kind = workload.kind
    candidates: list[Candidate] = []
    if kind in ("segment_csr", "segment_coo"):
        def ours() -> Tensor:
            if kind == "segment_csr":
                result = getattr(torchplug, f"segment_{reduce}_csr")(src, indptr)
            else:
                result = getattr(torchplug, f"segment_{reduce}_coo")(src, index, dim_size=n)
            return result[0] if isinstance(result, tuple) else result

        candidates.append(Candidate(TORCHPLUG, ours))
        if device.type == "cuda":
            candidates.append(Candidate(CHECKED, _checked(ours), "checked mode: indptr or index validated first"))
        candidates.append(Candidate("segment_reduce lengths",
                                    lambda: torch.segment_reduce(src, reduce, lengths=lengths, axis=0), _LENGTHS))
        candidates.append(Candidate("segment_reduce offsets",
                                    lambda: torch.segment_reduce(src, reduce, offsets=indptr, axis=0),
                                    "indptr as offsets"))
        if reduce == "sum":
            candidates.append(Candidate("index_add_", lambda: src.new_zeros(n, workload.f).index_add_(0, index, src)))
        else:
            native = _NATIVE[reduce]
            candidates.append(Candidate(
                "index_reduce_",
                lambda: src.new_zeros(n, workload.f).index_reduce_(0, index, src, native, include_self=False)))
        if torch_scatter is not None:
            if kind == "segment_csr":
                candidates.append(Candidate("torch_scatter",
                                            lambda: torch_scatter.segment_csr(src, indptr, reduce=reduce)))
            else:
                candidates.append(Candidate("torch_scatter",
                                            lambda: torch_scatter.segment_coo(src, index, dim_size=n, reduce=reduce)))
        return Lineup(tuple(candidates), reference="segment_reduce lengths")
    if kind in ("gather_csr", "gather_coo"):
        if kind == "gather_csr":
            candidates.append(Candidate(TORCHPLUG, lambda: torchplug.gather_csr(src, indptr)))
        else:
            candidates.append(Candidate(TORCHPLUG, lambda: torchplug.gather_coo(src, index)))
        candidates += [
            Candidate("index_select", lambda: src.index_select(0, index), "index prebuilt"),
            Candidate("repeat_interleave", lambda: src.repeat_interleave(lengths, dim=0, output_size=e), _LENGTHS),
        ]
        if torch_scatter is not None:
            if kind == "gather_csr":
                candidates.append(Candidate("torch_scatter", lambda: torch_scatter.gather_csr(src, indptr)))
            else:
                candidates.append(Candidate("torch_scatter", lambda: torch_scatter.gather_coo(src, index)))
        return Lineup(tuple(candidates), reference="index_select")
    # scatter_sum forward plus backward: the src gradient of sum(out * grad_out).
    leaf = src.detach().requires_grad_()
    grad_out = torch.randn(n, workload.f, device=device, dtype=src.dtype)
    expanded = index.view(-1, 1).expand_as(src)

    def backward_of(forward: Callable[[], Tensor]) -> Callable[[], Tensor]:
        def run() -> Tensor:
            return torch.autograd.grad(forward(), leaf, grad_out)[0]
        return run

    candidates += [
        Candidate(TORCHPLUG, backward_of(lambda: torchplug.scatter_sum(leaf, index, 0, dim_size=n))),
        Candidate("scatter_add", backward_of(lambda: src.new_zeros(n, workload.f).scatter_add(0, expanded, leaf)),
                  _EXPANDED),
        Candidate("index_add", backward_of(lambda: src.new_zeros(n, workload.f).index_add(0, index, leaf))),
    ]
    return Lineup(tuple(candidates), reference="index_add")


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
        op = {"mean": "mean", "min": "amin", "max": "amax"}[reduce]
        return xs.new_zeros(n, f).scatter_reduce_(0, expanded, messages, op, include_self=False)

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


def _add_lineup(workload: AddWorkload, device: torch.device) -> Lineup:
    """torchplug.add against torch.add."""
    x = workload.make_inputs(device)
    a, b = x.a, x.b
    candidates = (
        Candidate(TORCHPLUG, lambda: torchplug.add(a, b)),
        Candidate("torch.add", lambda: torch.add(a, b)),
    )
    return Lineup(candidates, reference="torch.add")


def lineup(workload: Workload, device: torch.device) -> Lineup:
    """Makes the workload's inputs on ``device`` (seeded, so the same every run)
    and the candidates over them."""
    torch.manual_seed(0)
    if isinstance(workload, ScatterWorkload):
        return _scatter_lineup(workload, device)
    if isinstance(workload, SegmentWorkload):
        return _segment_lineup(workload, device)
    if isinstance(workload, CompositeWorkload):
        return _composite_lineup(workload, device)
    if isinstance(workload, SpmmWorkload):
        return _spmm_lineup(workload, device)
    return _add_lineup(workload, device)
