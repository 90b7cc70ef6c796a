"""The scatter family's benchmark workloads: scatter_<reduce>, the segment
and gather ops, and scatter_sum's backward, each against what a user would
call instead (``python -m torchplug.bench --only scatter`` or ``segment``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug
from torchplug._reductions import BY_NAME, REDUCTIONS
from torchplug.bench.candidates import (CHECKED, DETERMINISTIC, EXPANDED, LENGTHS, TORCHPLUG, Candidate, Lineup,
                                        checked, deterministic, torch_scatter)
from torchplug.bench.workloads import (ScatterInputs, Scale, count_label, degrees_label, draw_index, dtype_label,
                                       index_label, largest_row, small_graph_sizes)


@dataclass(frozen=True)
class ScatterWorkload:
    """``scatter_<reduce>``: ``E x F`` elements of ``src`` into ``N`` slots along
    dim 0, or along the last dim of ``src [F, E]`` (``last_dim``, torch_scatter's
    default ``dim=-1``). The index is uniformly random or power-law (Chung-Lu
    degrees of ``exponent``: a real graph's few hubs and long tail), and
    sorted if asked."""

    op: ClassVar[str] = "scatter"
    e: int
    f: int
    n: int
    sorted_index: bool = False
    dtype: torch.dtype = torch.float32
    reduce: str = "sum"
    exponent: float | None = None
    last_dim: bool = False

    @property
    def order(self) -> str:
        """How the index is made, e.g. ``"sorted power-law 2.5"``."""
        return index_label(self.exponent, self.sorted_index)

    @property
    def name(self) -> str:
        """Table label, e.g. ``scatter_sum E=10M F=64 N=1M random float32``."""
        return (
            f"scatter_{self.reduce} E={count_label(self.e)} F={self.f} N={count_label(self.n)} "
            f"{self.order} {dtype_label(self.dtype)}" + (" dim=-1" if self.last_dim else "")
        )

    @property
    def terms_per_output(self) -> float:
        """How many ``src`` rows one output row sums, for the tolerance: the
        mean, or for a power-law index its largest row."""
        return largest_row(self.n, self.e, self.exponent)

    def min_bytes(self) -> int:
        """Read ``src`` once, read ``index`` once, write the output (and min and
        max's int64 arg) once."""
        s = self.dtype.itemsize + (8 if self.reduce in ("min", "max") else 0)
        return self.dtype.itemsize * self.e * self.f + 8 * self.e + s * self.n * self.f

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        return {
            "E": self.e,
            "F": self.f,
            "N": self.n,
            "index": self.order,
            "dtype": dtype_label(self.dtype),
            "reduce": self.reduce,
            "dim": -1 if self.last_dim else 0,
        }

    def make_inputs(self, device: torch.device) -> ScatterInputs:
        """Random ``src`` and the index, sorted if asked."""
        shape = (self.f, self.e) if self.last_dim else (self.e, self.f)
        src = torch.randn(shape, device=device, dtype=self.dtype)
        index = draw_index(self.n, self.e, device, self.exponent)
        if self.sorted_index:
            index = index.sort().values
        return ScatterInputs(src, index, -1 if self.last_dim else 0)

    def lineup(self, device: torch.device) -> Lineup:
        return _scatter_lineup(self, device)



@dataclass(frozen=True)
class SegmentInputs:
    """``src [E, F]`` (``[N, F]`` for a gather), the sorted ``index [E]``
    (every segment non-empty), its ``indptr [N + 1]`` and segment ``lengths [N]``."""

    src: Tensor
    index: Tensor
    indptr: Tensor
    lengths: Tensor


@dataclass(frozen=True)
class SegmentWorkload:
    """``kind``: ``segment_csr``/``segment_coo`` (``E x F`` sorted rows
    reduced into ``N`` segments), ``gather_csr``/``gather_coo`` (``N x F``
    rows copied out to their ``E`` positions), or ``scatter_backward``
    (scatter_sum forward plus backward with a random index). Segments are
    about E / N long, or power-law (Chung-Lu lengths of ``exponent``: a few
    hold much of E). Every segment holds at least one row, so that
    ``torch.segment_reduce`` (NaN or -inf for an empty one) is comparable."""

    op: ClassVar[str] = "segment"
    kind: str
    e: int
    f: int
    n: int
    reduce: str = "sum"
    exponent: float | None = None
    dtype: torch.dtype = torch.float32

    @property
    def name(self) -> str:
        """Table label, e.g. ``segment_sum_csr E=10M F=64 N=1M uniform float32``."""
        op = {"segment_csr": f"segment_{self.reduce}_csr", "segment_coo": f"segment_{self.reduce}_coo",
              "scatter_backward": "scatter_sum fw+bw"}.get(self.kind, self.kind)
        split = "random" if self.kind == "scatter_backward" else degrees_label(self.exponent)
        return f"{op} E={count_label(self.e)} F={self.f} N={count_label(self.n)} {split} {dtype_label(self.dtype)}"

    @property
    def terms_per_output(self) -> float:
        """The largest segment's length bounds the tolerance."""
        return 1 + largest_row(self.n, self.e - self.n, self.exponent)

    def min_bytes(self) -> int:
        """Each side once: the rows read and written, the index (coo: 8 E) or
        indptr (csr: 8 N), min and max's int64 arg; forward plus backward reads
        and writes E x F twice more (the gradient out, the src gradient)."""
        rows = self.dtype.itemsize * (self.e + self.n) * self.f
        positions = 8 * (self.e if self.kind.endswith("coo") else self.n)
        arg = 8 * self.n * self.f if self.reduce in ("min", "max") else 0
        if self.kind == "scatter_backward":
            return 2 * rows + 16 * self.e
        return rows + positions + arg

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        return {"kind": self.kind, "E": self.e, "F": self.f, "N": self.n, "reduce": self.reduce,
                "segments": degrees_label(self.exponent), "dtype": dtype_label(self.dtype)}

    def make_inputs(self, device: torch.device) -> SegmentInputs:
        """Random rows and a sorted index naming every segment at least once."""
        extra = draw_index(self.n, self.e - self.n, device, self.exponent)
        index = torch.cat([torch.arange(self.n, device=device), extra]).sort().values
        lengths = torch.bincount(index, minlength=self.n)
        indptr = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        if self.kind == "scatter_backward":
            index = index[torch.randperm(self.e, device=device)]
        rows = self.n if self.kind.startswith("gather") else self.e
        src = torch.randn(rows, self.f, device=device, dtype=self.dtype)
        return SegmentInputs(src, index, indptr, lengths)

    def lineup(self, device: torch.device) -> Lineup:
        return _segment_lineup(self, device)


@dataclass(frozen=True)
class PoolWorkload:
    """A global ``reduce`` pooling readout over a batch of ``graphs`` small
    graphs of ``low`` to ``high`` nodes each (uniform; molecule datasets hold
    15 to 35), ``F`` features per node: ``x [nodes, F]`` into ``[graphs, F]``
    by the sorted ``batch`` vector, or by the batch's ``ptr`` as a CSR."""

    op: ClassVar[str] = "pool"
    graphs: int
    low: int
    high: int
    f: int
    reduce: str = "mean"
    dtype: torch.dtype = torch.float32

    @property
    def nodes(self) -> int:
        """The expected node count, for the byte model."""
        return self.graphs * (self.low + self.high) // 2

    @property
    def name(self) -> str:
        """Table label, e.g. ``global_mean_pool 10K graphs of 15-35 F=128 float32``."""
        return (f"global_{self.reduce}_pool {count_label(self.graphs)} graphs of {self.low}-{self.high} "
                f"F={self.f} {dtype_label(self.dtype)}")

    @property
    def terms_per_output(self) -> float:
        return float(self.high)

    def min_bytes(self) -> int:
        """Read x and the ptr, write the readout (max's arg is not asked for)."""
        return self.dtype.itemsize * (self.nodes + self.graphs) * self.f + 8 * self.graphs

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        return {"graphs": self.graphs, "nodes": f"{self.low}-{self.high}", "F": self.f, "reduce": self.reduce,
                "dtype": dtype_label(self.dtype)}

    def lineup(self, device: torch.device) -> Lineup:
        return _pool_lineup(self, device)


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
                checked(ours),
                "checked mode: index validated first (torchplug.set_checks)",
            )
        )
        candidates.append(
            Candidate(
                DETERMINISTIC,
                deterministic(ours),
                "torch.use_deterministic_algorithms(True): no float atomics, same bits every run",
            )
        )
    native = BY_NAME[reduce].native
    if reduce == "sum":
        candidates += [
            Candidate("index_add_", lambda: zeros().index_add_(dim, index, src)),
            Candidate("scatter_add_", lambda: zeros().scatter_add_(dim, expanded, src), EXPANDED),
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
            EXPANDED,
        )
    )
    # segment_reduce leaves an empty segment at NaN (mean) or -inf (max), not 0.
    if workload.sorted_index and reduce == "sum" and not workload.last_dim:
        lengths = torch.bincount(index, minlength=n)
        candidates.append(
            Candidate(
                "segment_reduce",
                lambda: torch.segment_reduce(src, "sum", lengths=lengths, axis=0),
                LENGTHS,
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
            candidates.append(Candidate(CHECKED, checked(ours), "checked mode: indptr or index validated first"))
        candidates.append(Candidate("segment_reduce lengths",
                                    lambda: torch.segment_reduce(src, reduce, lengths=lengths, axis=0), LENGTHS))
        candidates.append(Candidate("segment_reduce offsets",
                                    lambda: torch.segment_reduce(src, reduce, offsets=indptr, axis=0),
                                    "indptr as offsets"))
        if reduce == "sum":
            candidates.append(Candidate("index_add_", lambda: src.new_zeros(n, workload.f).index_add_(0, index, src)))
        else:
            native = BY_NAME[reduce].native
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
            Candidate("repeat_interleave", lambda: src.repeat_interleave(lengths, dim=0, output_size=e), LENGTHS),
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
                  EXPANDED),
        Candidate("index_add", backward_of(lambda: src.new_zeros(n, workload.f).index_add(0, index, leaf))),
    ]
    return Lineup(tuple(candidates), reference="index_add")


def _pool_lineup(workload: PoolWorkload, device: torch.device) -> Lineup:
    """segment_<reduce>_csr over the batch's ptr and segment_<reduce>_coo over
    its batch vector against torch.segment_reduce and PyG's
    global_<reduce>_pool (backend off, and on) where torch_geometric is installed."""
    sizes = small_graph_sizes(workload.graphs, workload.low, workload.high, device)
    batch = torch.repeat_interleave(torch.arange(workload.graphs, device=device), sizes)
    ptr = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])
    x = torch.randn(batch.numel(), workload.f, device=device, dtype=workload.dtype)
    reduce, graphs = workload.reduce, workload.graphs

    def first(result: Tensor | tuple[Tensor, Tensor]) -> Tensor:  # max's values, without its arg
        return result[0] if isinstance(result, tuple) else result

    csr, coo = getattr(torchplug, f"segment_{reduce}_csr"), getattr(torchplug, f"segment_{reduce}_coo")
    candidates = [
        Candidate(TORCHPLUG, lambda: first(csr(x, ptr)), "segment_csr over the batch's ptr"),
        Candidate("torchplug segment_coo", lambda: first(coo(x, batch, dim_size=graphs)), "over the batch vector"),
        Candidate("segment_reduce", lambda: torch.segment_reduce(x, reduce, lengths=sizes, axis=0), LENGTHS),
    ]
    try:
        import torch_geometric.nn as pyg_nn

        from torchplug import pyg as backend
    except ImportError:
        pyg_nn = None
    if pyg_nn is not None:
        pool = getattr(pyg_nn, f"global_{workload.reduce.replace('sum', 'add')}_pool")
        candidates += [
            Candidate("PyG pool", lambda: pool(x, batch, graphs), "backend off",
                      context=lambda: backend.enabled(False)),
            Candidate("PyG pool backend on", lambda: pool(x, batch, graphs), "torchplug.pyg enabled",
                      context=backend.enabled),
        ]
    return Lineup(tuple(candidates), reference="segment_reduce")


def workloads(scale: Scale) -> tuple[ScatterWorkload | SegmentWorkload, ...]:
    """On a GPU, index orders, widths, dtypes and every reduction at E = 10M
    rows; on a CPU, every reduction at F in {1, 16, 64} with a random index
    and F = 16 sorted; then the segment and gather ops."""
    if scale.gpu:
        m = 1_000_000
        return (
            ScatterWorkload(10 * m, 64, m),
            ScatterWorkload(10 * m, 64, m, sorted_index=True),
            ScatterWorkload(50 * m, 1, m),
            ScatterWorkload(50 * m, 1, m, sorted_index=True),
            ScatterWorkload(4 * m, 256, 200_000),
            ScatterWorkload(4 * m, 256, 200_000, sorted_index=True),
            ScatterWorkload(20 * m, 16, 2 * m, sorted_index=True),
            ScatterWorkload(10 * m, 64, m, dtype=torch.bfloat16),
            *(ScatterWorkload(10 * m, 64, m, reduce=r) for r in ("mean", "mul", "min", "max")),
            *(ScatterWorkload(10 * m, 64, m, sorted_index=True, reduce=r) for r in ("mean", "max")),
            *(ScatterWorkload(200_000, 256, 1000, reduce=r, last_dim=True) for r in ("sum", "max")),
            *(ScatterWorkload(10 * m, 64, m, reduce=r, exponent=2.0) for r in ("sum", "max")),
            *(SegmentWorkload(kind, 10 * m, f, m, reduce=r)
              for kind in ("segment_csr", "segment_coo") for r in ("sum", "mean") for f in (16, 64, 256)),
            *(SegmentWorkload(kind, 10 * m, 64, m, reduce=r)
              for kind in ("segment_csr", "segment_coo") for r in ("min", "max")),
            *(SegmentWorkload("segment_csr", 10 * m, 64, 10_000, reduce=r) for r in ("sum", "max")),
            *(SegmentWorkload(kind, 10 * m, 64, m, reduce=r, exponent=2.0)
              for kind in ("segment_csr", "segment_coo") for r in ("sum", "max")),
            *(SegmentWorkload(kind, 10 * m, 64, m) for kind in ("gather_csr", "gather_coo")),
            SegmentWorkload("gather_csr", 10 * m, 4, m),
            SegmentWorkload("gather_csr", 10 * m, 64, m, exponent=2.5),
            SegmentWorkload("scatter_backward", 10 * m, 64, m),
            *(ScatterWorkload(e, 64, e // 10, exponent=2.5) for e in (m, 10 * m, 50 * m)),
            *(ScatterWorkload(10 * m, 64, m, reduce=r, exponent=2.5) for r in ("mean", "min", "max")),
            *(SegmentWorkload("segment_csr", 10 * m, 64, m, reduce=r, exponent=2.5) for r in ("sum", "max")),
            *(PoolWorkload(g, 15, 35, f, reduce=r) for g, f in ((10_000, 128), (100_000, 64))
              for r in ("sum", "mean", "max")),
            PoolWorkload(1000, 500, 1500, 128, reduce="max"),
        )
    e, n = scale.e, scale.n
    return (
        *(ScatterWorkload(e, f, n, reduce=r.name) for r in REDUCTIONS for f in (1, 16, 64)),
        ScatterWorkload(e, 16, n, sorted_index=True),
        *(SegmentWorkload("segment_csr", e, f, n, reduce=r) for r in ("sum", "mean", "max") for f in (16, 64)),
        SegmentWorkload("segment_coo", e, 16, n),
        *(SegmentWorkload(kind, e, 16, n) for kind in ("gather_csr", "gather_coo")),
        ScatterWorkload(e, 16, n, exponent=2.5),
        SegmentWorkload("segment_csr", e, 16, n, exponent=2.5),
        *(PoolWorkload(max(1000, n // 20), 15, 35, 64, reduce=r) for r in ("mean", "max")),
    )
