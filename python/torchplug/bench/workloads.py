"""The workloads the benchmark runs: their sizes per profile, inputs and byte model."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor


def count_label(n: int) -> str:
    """``10_000_000 -> "10M"``, ``200_000 -> "200K"``, ``2**29 -> "2^29"``."""
    if n >= 1024 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    for unit, size in (("M", 1_000_000), ("K", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def dtype_label(dtype: torch.dtype) -> str:
    """``torch.float32 -> "float32"``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class ScatterInputs:
    """``src [E, F]`` (``[F, E]`` for ``last_dim``) and ``index [E]`` (int64,
    values in ``[0, N)``); ``dim`` is the dimension of ``src`` reduced."""

    src: Tensor
    index: Tensor
    dim: int = 0


@dataclass(frozen=True)
class ScatterWorkload:
    """``scatter_<reduce>``: ``E x F`` elements of ``src`` into ``N`` slots along
    dim 0, or along the last dim of ``src [F, E]`` (``last_dim``, torch_scatter's
    default ``dim=-1``). The index is uniformly random, sorted, or power-law
    (``skew``: row ``r`` about as likely as ``1 / (r + 1)``, a real graph's few
    hubs and long tail)."""

    op: ClassVar[str] = "scatter"
    e: int
    f: int
    n: int
    sorted_index: bool = False
    dtype: torch.dtype = torch.float32
    reduce: str = "sum"
    skew: bool = False
    last_dim: bool = False

    @property
    def order(self) -> str:
        """``"sorted"``, ``"power-law"`` or ``"random"``: how the index is made."""
        return "sorted" if self.sorted_index else "power-law" if self.skew else "random"

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
        mean, or for a power-law index its largest row (about E / ln N)."""
        if self.skew:
            return max(1.0, self.e / math.log(self.n))
        return max(1.0, self.e / self.n)

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
        if self.skew:  # log-uniform over [1, N]: density about 1 / x
            u = torch.rand(self.e, device=device, dtype=torch.float64)
            index = (torch.pow(float(self.n), u).long() - 1).clamp_(0, self.n - 1)
        else:
            index = torch.randint(0, self.n, (self.e,), device=device)
        if self.sorted_index:
            index = index.sort().values
        return ScatterInputs(src, index, -1 if self.last_dim else 0)


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
    (scatter_sum forward plus backward with a random index). ``split``:
    ``uniform`` (segments of about E / N), ``skewed`` (power-law: a few
    segments hold most of E). Every segment holds at least one row, so that
    ``torch.segment_reduce`` (NaN or -inf for an empty one) is comparable."""

    op: ClassVar[str] = "segment"
    kind: str
    e: int
    f: int
    n: int
    reduce: str = "sum"
    split: str = "uniform"
    dtype: torch.dtype = torch.float32

    @property
    def name(self) -> str:
        """Table label, e.g. ``segment_sum_csr E=10M F=64 N=1M uniform float32``."""
        op = {"segment_csr": f"segment_{self.reduce}_csr", "segment_coo": f"segment_{self.reduce}_coo",
              "scatter_backward": "scatter_sum fw+bw"}.get(self.kind, self.kind)
        split = "random" if self.kind == "scatter_backward" else self.split
        return f"{op} E={count_label(self.e)} F={self.f} N={count_label(self.n)} {split} {dtype_label(self.dtype)}"

    @property
    def terms_per_output(self) -> float:
        """The largest segment's length bounds the tolerance (a power-law
        split's largest is about E / ln N)."""
        if self.split == "skewed":
            return max(1.0, self.e / math.log(self.n))
        return max(1.0, self.e / self.n)

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
                "split": self.split, "dtype": dtype_label(self.dtype)}

    def make_inputs(self, device: torch.device) -> SegmentInputs:
        """Random rows and a sorted index naming every segment at least once."""
        if self.split == "skewed":  # log-uniform over [1, N]: density about 1 / x
            u = torch.rand(self.e - self.n, device=device, dtype=torch.float64)
            extra = (torch.pow(float(self.n), u).long() - 1).clamp_(0, self.n - 1)
        else:
            extra = torch.randint(0, self.n, (self.e - self.n,), device=device)
        index = torch.cat([torch.arange(self.n, device=device), extra]).sort().values
        lengths = torch.bincount(index, minlength=self.n)
        indptr = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        if self.kind == "scatter_backward":
            index = index[torch.randperm(self.e, device=device)]
        rows = self.n if self.kind.startswith("gather") else self.e
        src = torch.randn(rows, self.f, device=device, dtype=self.dtype)
        return SegmentInputs(src, index, indptr, lengths)


@dataclass(frozen=True)
class CompositeWorkload:
    """A composite over ``E x F`` rows of ``src`` grouped into ``N`` by a
    random or sorted index along dim 0: ``softmax`` (GAT's per-node
    attention, F heads), ``softmax_fwbw`` (forward plus backward), ``logsumexp``
    or ``std``."""

    op: ClassVar[str] = "composite"
    kind: str
    e: int
    f: int
    n: int
    sorted_index: bool = False
    dtype: torch.dtype = torch.float32

    @property
    def name(self) -> str:
        """Table label, e.g. ``scatter_softmax fw+bw E=10M F=8 N=1M random float32``."""
        op = "scatter_softmax fw+bw" if self.kind == "softmax_fwbw" else f"scatter_{self.kind}"
        order = "sorted" if self.sorted_index else "random"
        return f"{op} E={count_label(self.e)} F={self.f} N={count_label(self.n)} {order} {dtype_label(self.dtype)}"

    @property
    def terms_per_output(self) -> float:
        return max(1.0, self.e / self.n)

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
                "index": "sorted" if self.sorted_index else "random", "dtype": dtype_label(self.dtype)}

    def make_inputs(self, device: torch.device) -> ScatterInputs:
        """Random ``src`` and index (every group likely non-empty), sorted if asked."""
        src = torch.randn(self.e, self.f, device=device, dtype=self.dtype)
        index = torch.randint(0, self.n, (self.e,), device=device)
        if self.sorted_index:
            index = index.sort().values
        return ScatterInputs(src, index, 0)


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
    columns; rows uniform, or ``skew``: power-law degrees with a few hubs) and
    ``x [N, F]``; ``backward``: the sum forward plus x's gradient, and with
    ``value_grad`` value's too."""

    op: ClassVar[str] = "spmm"
    e: int
    f: int
    n: int
    reduce: str = "sum"
    skew: bool = False
    backward: bool = False
    dtype: torch.dtype = torch.float32
    value_grad: bool = False

    @property
    def name(self) -> str:
        """Table label, e.g. ``spmm_sum E=10M F=64 N=1M uniform float32``."""
        op = f"spmm_{self.reduce}" + (" fw+bw" if self.backward else "") + (" (x, value)" if self.value_grad else "")
        degrees = "power-law" if self.skew else "uniform"
        return f"{op} E={count_label(self.e)} F={self.f} N={count_label(self.n)} {degrees} {dtype_label(self.dtype)}"

    @property
    def terms_per_output(self) -> float:
        return max(1.0, self.e / math.log(self.n)) if self.skew else max(1.0, self.e / self.n)

    def min_bytes(self) -> int:
        """Gather x once per edge (E x F), read col and value, write N x F;
        backward as much again for x's gradient (over the transpose) and for
        value's (x gathered per edge again, the output's gradient read)."""
        once = self.dtype.itemsize * (self.e + self.n) * self.f + 12 * self.e
        return (1 + self.backward + self.value_grad) * once

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        return {"E": self.e, "F": self.f, "N": self.n, "reduce": self.reduce,
                "degrees": "power-law" if self.skew else "uniform", "backward": self.backward,
                "value_grad": self.value_grad, "dtype": dtype_label(self.dtype)}

    def make_inputs(self, device: torch.device) -> SpmmInputs:
        if self.skew:  # log-uniform rows over [1, N]: density about 1 / x
            u = torch.rand(self.e, device=device, dtype=torch.float64)
            row = (torch.pow(float(self.n), u).long() - 1).clamp_(0, self.n - 1)
        else:
            row = torch.randint(0, self.n, (self.e,), device=device)
        row = row.sort().values
        col = torch.randint(0, self.n, (self.e,), device=device)
        value = torch.rand(self.e, device=device, dtype=self.dtype)
        rowptr = torch.cat([row.new_zeros(1), torch.bincount(row, minlength=self.n).cumsum(0)])
        adj = torch.sparse_csr_tensor(rowptr, col, value, (self.n, self.n))
        x = torch.randn(self.n, self.f, device=device, dtype=self.dtype)
        return SpmmInputs(rowptr, col, value, adj, row, x)


@dataclass(frozen=True)
class AddInputs:
    """The two operands (views where the layout asks for one)."""

    a: Tensor
    b: Tensor


def _shape_label(shape: tuple[int, ...]) -> str:
    """``(8192, 1) -> "[8192,1]"``."""
    return "[" + ",".join(str(s) for s in shape) + "]"


@dataclass(frozen=True)
class AddWorkload:
    """Elementwise ``a + b``: two contiguous operands of ``numel`` elements, or
    ``a`` of ``shape_a`` and ``b`` of ``shape_b`` broadcast together. ``dtype_b``
    is b's dtype where it differs from a's (the result takes PyTorch's
    promotion); ``transposed``: a is the transpose (``.t()``) of a contiguous
    tensor, a view that is not contiguous."""

    op: ClassVar[str] = "add"
    numel: int = 0
    dtype: torch.dtype = torch.float32
    shape_a: tuple[int, ...] = ()
    shape_b: tuple[int, ...] = ()
    dtype_b: torch.dtype | None = None
    transposed: bool = False
    terms_per_output: ClassVar[float] = 1.0

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """a's and b's shapes (both ``(numel,)`` when none was given)."""
        return (self.shape_a, self.shape_b) if self.shape_a else ((self.numel,), (self.numel,))

    @property
    def out_dtype(self) -> torch.dtype:
        return torch.promote_types(self.dtype, self.dtype_b or self.dtype)

    @property
    def name(self) -> str:
        """Table label, e.g. ``add n=2^29 float32`` or
        ``add [8192,1]+[1,16384] bfloat16``."""
        dtypes = dtype_label(self.dtype)
        if self.dtype_b is not None:
            dtypes += f"+{dtype_label(self.dtype_b)}"
        if not self.shape_a:
            return f"add n={count_label(self.numel)} {dtypes}"
        a, b = self.shapes
        a_label = _shape_label(a[::-1]) + ".t()" if self.transposed else _shape_label(a)
        return f"add {a_label}+{_shape_label(b)} {dtypes}"

    def _out_numel(self) -> int:
        return math.prod(torch.broadcast_shapes(*self.shapes))

    def min_bytes(self) -> int:
        """Read both operands once, write the result once."""
        a, b = self.shapes
        return (math.prod(a) * self.dtype.itemsize + math.prod(b) * (self.dtype_b or self.dtype).itemsize
                + self._out_numel() * self.out_dtype.itemsize)

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""
        a, b = self.shapes
        return {"numel": self._out_numel(), "a": list(a), "b": list(b), "dtype": dtype_label(self.dtype),
                "dtype_b": dtype_label(self.dtype_b or self.dtype), "transposed": self.transposed}

    def make_inputs(self, device: torch.device) -> AddInputs:
        """Two random operands (integers in [-1000, 1000))."""

        def operand(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
            if dtype.is_floating_point:
                return torch.randn(shape, device=device, dtype=dtype)
            return torch.randint(-1000, 1000, shape, device=device, dtype=dtype)

        a_shape, b_shape = self.shapes
        if self.transposed:
            a = operand(a_shape[::-1], self.dtype).t()
        else:
            a = operand(a_shape, self.dtype)
        return AddInputs(a, operand(b_shape, self.dtype_b or self.dtype))


def add_layouts(numel: int) -> tuple[AddWorkload, ...]:
    """The layouts add must be as fast as ``torch.add`` in, at about ``numel``
    outputs (a power of two): an outer broadcast ``[R, 1] + [1, C]`` in bfloat16
    and float32, a bias ``[N, 256] + [256]`` and a column ``[N, 256] + [N, 1]``,
    a transposed input, and mixed dtypes (bfloat16, float16 or int32 with
    float32, contiguous, and a bfloat16 ``[N, 256]`` plus a float32 bias)."""
    cols = 2 ** ((numel.bit_length() - 1 + 1) // 2)
    rows = max(1, numel // cols)
    n = max(1, numel // 256)
    outer = ((rows, 1), (1, cols))
    return (
        AddWorkload(dtype=torch.bfloat16, shape_a=outer[0], shape_b=outer[1]),
        AddWorkload(shape_a=outer[0], shape_b=outer[1]),
        AddWorkload(shape_a=(n, 256), shape_b=(256,)),
        AddWorkload(dtype=torch.bfloat16, shape_a=(n, 256), shape_b=(256,)),
        AddWorkload(shape_a=(n, 256), shape_b=(n, 1)),
        AddWorkload(shape_a=(rows, cols), shape_b=(rows, cols), transposed=True),
        AddWorkload(numel, torch.bfloat16, dtype_b=torch.float32),
        AddWorkload(numel, torch.float16, dtype_b=torch.float32),
        AddWorkload(numel, torch.int32, dtype_b=torch.float32),
        AddWorkload(dtype=torch.bfloat16, shape_a=(n, 256), shape_b=(256,), dtype_b=torch.float32),
    )


Workload = ScatterWorkload | SegmentWorkload | CompositeWorkload | SpmmWorkload | AddWorkload

REDUCTIONS = ("sum", "mean", "mul", "min", "max")


@dataclass(frozen=True)
class Profile:
    """A set of workloads with the repeat counts and copy size that suit a machine."""

    name: str
    workloads: tuple[Workload, ...]
    copy_numel: int  #: float32 elements in the copy-bandwidth measurement
    warmup: int
    repeats: int


def _gpu_profile() -> Profile:
    """Sizes for a large GPU (H200): inputs far beyond L2."""
    m = 1_000_000
    return Profile(
        name="gpu",
        workloads=(
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
            *(ScatterWorkload(10 * m, 64, m, reduce=r, skew=True) for r in ("sum", "max")),
            *(SegmentWorkload(kind, 10 * m, f, m, reduce=r)
              for kind in ("segment_csr", "segment_coo") for r in ("sum", "mean") for f in (16, 64, 256)),
            *(SegmentWorkload(kind, 10 * m, 64, m, reduce=r)
              for kind in ("segment_csr", "segment_coo") for r in ("min", "max")),
            *(SegmentWorkload("segment_csr", 10 * m, 64, 10_000, reduce=r) for r in ("sum", "max")),
            *(SegmentWorkload(kind, 10 * m, 64, m, reduce=r, split="skewed")
              for kind in ("segment_csr", "segment_coo") for r in ("sum", "max")),
            *(SegmentWorkload(kind, 10 * m, 64, m) for kind in ("gather_csr", "gather_coo")),
            SegmentWorkload("scatter_backward", 10 * m, 64, m),
            *(CompositeWorkload(kind, 10 * m, 8, m, sorted_index=s)
              for kind in ("softmax", "softmax_fwbw") for s in (False, True)),
            *(CompositeWorkload(kind, 10 * m, 64, m) for kind in ("logsumexp", "std")),
            *(SpmmWorkload(e, f, n, skew=skew) for e, f, n in ((10 * m, 64, m), (4 * m, 256, 200_000),
                                                               (20 * m, 16, 2 * m)) for skew in (False, True)),
            *(SpmmWorkload(e, f, n, reduce=r) for e, f, n in ((10 * m, 64, m), (4 * m, 256, 200_000))
              for r in ("mean", "min", "max")),
            *(SpmmWorkload(e, f, n, backward=True) for e, f, n in ((10 * m, 64, m), (4 * m, 256, 200_000))),
            *(SpmmWorkload(10 * m, 64, m, dtype=d) for d in (torch.float16, torch.bfloat16)),
            *(SpmmWorkload(10 * m, 64, m, backward=True, value_grad=True, dtype=d) for d in (torch.float32,
                                                                                            torch.bfloat16)),
            AddWorkload(2**29),
            *add_layouts(2**27),
        ),
        copy_numel=2**29,
        warmup=5,
        repeats=20,
    )


def _cpu_profile(
    name: str, e: int, n: int, add_numel: int, copy_numel: int, warmup: int, repeats: int
) -> Profile:
    """The CPU set at a given scale: F in {1, 16, 64} with a random index for
    every reduction, F=16 sorted, add (contiguous and its other layouts)."""
    return Profile(
        name=name,
        workloads=(
            *(ScatterWorkload(e, f, n, reduce=r) for r in REDUCTIONS for f in (1, 16, 64)),
            ScatterWorkload(e, 16, n, sorted_index=True),
            *(SegmentWorkload("segment_csr", e, f, n, reduce=r) for r in ("sum", "mean", "max") for f in (16, 64)),
            SegmentWorkload("segment_coo", e, 16, n),
            *(SegmentWorkload(kind, e, 16, n) for kind in ("gather_csr", "gather_coo")),
            *(CompositeWorkload(kind, e, 8, n) for kind in ("softmax", "softmax_fwbw")),
            CompositeWorkload("std", e, 16, n),
            *(SpmmWorkload(e, 16, n, reduce=r) for r in ("sum", "mean", "max")),
            AddWorkload(add_numel),
            *add_layouts(add_numel),
        ),
        copy_numel=copy_numel,
        warmup=warmup,
        repeats=repeats,
    )


def select_profile(device: torch.device, quick: bool, tiny: bool) -> Profile:
    """``tiny`` (tests) > ``quick`` (a 2-core machine in under a minute) > the device's full set."""
    if tiny:
        return _cpu_profile("tiny", 4096, 512, 2**12, 2**16, warmup=1, repeats=2)
    if quick:
        return _cpu_profile("quick", 500_000, 50_000, 2**23, 2**24, warmup=1, repeats=5)
    if device.type == "cuda":
        return _gpu_profile()
    return _cpu_profile("cpu", 2_000_000, 200_000, 2**25, 2**26, warmup=2, repeats=10)
