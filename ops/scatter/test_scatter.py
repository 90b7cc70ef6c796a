"""torchplug.scatter_sum against plain PyTorch on the same inputs.

Reference: ``torch.zeros(out_shape).index_add_(dim, index, src)`` for a 1-D index
and ``.scatter_add_(dim, broadcast(index), src)`` for any other index shape,
computed in float64 (int64 for integer dtypes) and cast back to src's dtype.

Tolerances (see ``assert_scatter_close``), with ``mag`` = the same scatter of
``|src|`` (plus ``|out|`` for ``out=``), i.e. the sum of the magnitudes that
landed in each output slot:

* int32/int64: exact.
* float64: ``1e-12 * mag``. The kernel and the reference add in different
  orders; recursive summation is off by at most ``(n - 1) * 2**-53 * mag``,
  about 1e-16 * mag per term in practice for random-sign inputs.
* float32: ``1e-5 + 1e-5 * mag`` (rtol/atol 1e-5 relative to the magnitude of
  what was summed; float32 accumulation error is ~6e-8 * mag for random-sign
  inputs, well inside it).
* float16/bfloat16: the kernel accumulates in float32 and rounds once, the
  reference rounds the float64 sum once. Both are round-to-nearest of values
  within the float32 accumulation error of the exact sum, so they differ by at
  most 1 ulp of the output dtype (half an ulp each) plus that accumulation
  error: ``1 ulp(max(|actual|, |expected|)) + 1e-5 * mag``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Optional

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.autograd import gradcheck, gradgradcheck

import torchplug
from op_table import (DET_E, DET_N, OpRow, Sample, assert_bitwise, cpu_threads, det_index, deterministic_algorithms,
                      rows_param, values)
from scatter_reference import broadcast_index, default_dim_size, gamma, ulp
from scatter_rows import SCATTER_ROWS, scatter_rows_param

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INT_DTYPES = [torch.int32, torch.int64]
DTYPES = FLOAT_DTYPES + INT_DTYPES

OP = "torchplug::scatter_sum"


# --------------------------------------------------------------------------- helpers


def make_src(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """Random src with no zero elements (never an all-zero input)."""
    if dtype.is_floating_point:
        t = torch.randn(shape, dtype=torch.float64, device=device)
        t = torch.where(t == 0, torch.ones_like(t), t)
        return t.to(dtype)
    t = torch.randint(-50, 50, shape, dtype=torch.int64, device=device)
    return torch.where(t == 0, torch.ones_like(t), t).to(dtype)


def make_index(E: int, N: int, device: str, dist: str = "random") -> torch.Tensor:
    """A 1-D int64 index of length E with values in [0, N)."""
    if dist == "random":
        return torch.randint(0, N, (E,), device=device)
    if dist == "sorted":
        return torch.randint(0, N, (E,), device=device).sort().values
    if dist == "skewed":
        # ~90% of the entries on one slot, the rest spread out.
        idx = torch.randint(0, N, (E,), device=device)
        return torch.where(torch.rand(E, device=device) < 0.9, torch.full_like(idx, N // 2), idx)
    if dist == "all-equal":
        return torch.full((E,), N - 1, dtype=torch.long, device=device)
    raise AssertionError(dist)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype.is_floating_point else torch.int64


def reference(
    src: torch.Tensor,
    index: torch.Tensor,
    dim: int,
    dim_size: Optional[int] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Plain-PyTorch scatter-sum in float64/int64, not yet cast back."""
    dim = dim % src.dim()
    if out is not None:
        base = out.to(acc_dtype(src.dtype)).clone()
    else:
        if dim_size is None:
            dim_size = default_dim_size(index, src, dim)
        shape = list(src.shape)
        shape[dim] = dim_size
        base = torch.zeros(shape, dtype=acc_dtype(src.dtype), device=src.device)
    wide = src.to(base.dtype)
    if index.dim() == 1:
        return base.index_add_(dim, index, wide)
    return base.scatter_add_(dim, broadcast_index(index, src, dim), wide)


def magnitude(
    src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: Optional[int], out: Optional[torch.Tensor]
) -> torch.Tensor:
    """Per output slot, the sum of |terms| that were added there (float64)."""
    abs_out = None if out is None else out.double().abs()
    return reference(src.double().abs(), index, dim, dim_size, abs_out)


def assert_scatter_close(
    actual: torch.Tensor,
    src: torch.Tensor,
    index: torch.Tensor,
    dim: int,
    dim_size: Optional[int] = None,
    out: Optional[torch.Tensor] = None,
) -> None:
    """``actual`` equals the reference scatter-sum of the given inputs within the
    dtype's tolerance (module docstring). ``out`` is the tensor before the call."""
    expected_wide = reference(src, index, dim, dim_size, out)
    dtype = src.dtype
    assert actual.dtype == dtype
    assert actual.device == src.device
    assert actual.shape == expected_wide.shape
    if not dtype.is_floating_point:
        torch.testing.assert_close(actual, expected_wide.to(dtype), rtol=0, atol=0)
        return
    expected = expected_wide.to(dtype)
    mag = magnitude(src, index, dim, dim_size, out)
    got = actual.double()
    if dtype == torch.float64:
        tol = 1e-12 * mag
    elif dtype == torch.float32:
        tol = 1e-5 + 1e-5 * mag
    else:
        tol = ulp(torch.maximum(got.abs(), expected.double().abs()), dtype) + 1e-5 * mag
    err = (got - expected.double()).abs()
    bad = err > tol
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} elements off; worst error {float(err.max())} "
        f"at {tuple(int(i) for i in torch.nonzero(bad)[0])}, "
        f"actual {float(got[bad][0])} expected {float(expected.double()[bad][0])}"
    )


def assert_exact_sums(src: torch.Tensor, index: torch.Tensor, dim: int, base: torch.Tensor) -> None:
    """scatter_sum of src (1-D index) into a fresh output of base's shape and
    into out=base cast to src's dtype equals index_add_ in float64 or int64,
    rounded once to the dtype, with no tolerance: for inputs whose sums the
    kernels' accumulator holds exactly (small integers). Index values outside
    [0, base.shape[dim]) are left out of the reference (CUDA skips them)."""
    N = base.shape[dim]
    wide = acc_dtype(src.dtype)
    kept = ((index >= 0) & (index < N)).nonzero().squeeze(1)
    kept_src, kept_index = src.index_select(dim, kept).to(wide), index[kept]

    def want(start: torch.Tensor) -> torch.Tensor:
        return start.to(wide).index_add_(dim, kept_index, kept_src).to(src.dtype)

    out = torchplug.scatter_sum(src, index, dim, dim_size=N)
    torch.testing.assert_close(out, want(torch.zeros_like(base)), rtol=0, atol=0)
    out = base.to(src.dtype)
    torchplug.scatter_sum(src, index, dim, out=out)
    torch.testing.assert_close(out, want(base), rtol=0, atol=0)


# --------------------------------------------------------------------------- shapes

# (src shape, dim, index kind, N). Index kinds: "1d" an [E] vector; "full" the
# shape of src; "E1" shape [E, 1] (src [E, B, F], dim 0); "BE" shape [B, E]
# (src [B, E, F], dim 1). N bounds the index values.
CASES = [
    pytest.param((37,), 0, "1d", 9, id="1d"),
    pytest.param((37,), -1, "1d", 9, id="1d-neg"),
    pytest.param((37,), 0, "full", 9, id="1d-full"),
    pytest.param((50, 7), 0, "1d", 11, id="2d-dim0"),
    pytest.param((7, 50), 1, "1d", 11, id="2d-dim1"),
    pytest.param((7, 50), -1, "1d", 11, id="2d-dim-1"),
    pytest.param((50, 7), -2, "1d", 11, id="2d-dim-2"),
    pytest.param((40, 3, 5), 0, "1d", 6, id="3d-dim0"),
    pytest.param((3, 40, 5), 1, "1d", 6, id="3d-dim1"),
    pytest.param((3, 5, 40), 2, "1d", 6, id="3d-dim2"),
    pytest.param((3, 5, 40), -1, "1d", 6, id="3d-dim-1"),
    pytest.param((3, 40, 5), -2, "1d", 6, id="3d-dim-2"),
    pytest.param((40, 3, 5), -3, "1d", 6, id="3d-dim-3"),
    pytest.param((30, 4), 0, "full", 8, id="2d-full-dim0"),
    pytest.param((4, 30), 1, "full", 8, id="2d-full-dim1"),
    pytest.param((4, 30, 3), 1, "full", 8, id="3d-full-dim1"),
    pytest.param((4, 3, 30), -1, "full", 8, id="3d-full-dim-1"),
    pytest.param((30, 4, 3), 0, "E1", 8, id="3d-index-E1"),
    pytest.param((4, 30, 3), 1, "BE", 8, id="3d-index-BE"),
    pytest.param((4, 30, 3), -2, "BE", 8, id="3d-index-BE-neg"),
    pytest.param((2, 3, 33, 2), 2, "1d", 5, id="4d-dim2"),
]


def index_for(kind: str, src_shape: tuple[int, ...], dim: int, N: int, device: str) -> torch.Tensor:
    dim = dim % len(src_shape)
    E = src_shape[dim]
    if kind == "1d":
        return make_index(E, N, device)
    if kind == "full":
        return torch.randint(0, N, src_shape, device=device)
    if kind == "E1":
        return torch.randint(0, N, (E, 1), device=device)
    if kind == "BE":
        return torch.randint(0, N, src_shape[: dim + 1], device=device)
    raise AssertionError(kind)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim, kind, N", CASES)
def test_matches_torch(
    shape: tuple, dim: int, kind: str, N: int, dtype: torch.dtype, device: str, assert_same_result
) -> None:
    torch.manual_seed(0)
    src = make_src(shape, dtype, device)
    index = index_for(kind, shape, dim, N, device)
    out = torchplug.scatter_sum(src, index, dim)
    assert_scatter_close(out, src, index, dim)
    # The schema-level op and the reduce="sum"/"add" spellings agree exactly.
    assert_same_result(torch.ops.torchplug.scatter_sum(src, index, dim), out)
    if dim == -1:  # the default dim
        assert_same_result(torchplug.scatter_sum(src, index), out)
    for reduce in ("sum", "add"):
        assert_same_result(torchplug.scatter(src, index, dim, reduce=reduce), out)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim, kind, N", CASES[::3])
def test_dim_size_larger_than_max(
    shape: tuple, dim: int, kind: str, N: int, dtype: torch.dtype, device: str
) -> None:
    torch.manual_seed(1)
    src = make_src(shape, dtype, device)
    index = index_for(kind, shape, dim, N, device)
    dim_size = int(index.max()) + 4
    out = torchplug.scatter_sum(src, index, dim, dim_size=dim_size)
    assert out.size(dim) == dim_size
    assert_scatter_close(out, src, index, dim, dim_size=dim_size)
    extra = out.narrow(dim % src.dim(), int(index.max()) + 1, 3)
    assert (extra == 0).all()


# --------------------------------------------------------------------------- empty


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_src(dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(2)
    src = make_src((0, 4), dtype, device)
    index = torch.empty(0, dtype=torch.long, device=device)
    # dim_size given: all-zero output of that size.
    out = torchplug.scatter_sum(src, index, 0, dim_size=5)
    assert_scatter_close(out, src, index, 0, dim_size=5)
    assert out.shape == (5, 4) and (out == 0).all()
    # dim_size None with an empty index: size 0 along dim.
    out = torchplug.scatter_sum(src, index, 0)
    assert out.shape == (0, 4)
    assert_scatter_close(out, src, index, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
@pytest.mark.parametrize(
    "shape, dim, dim_size",
    [
        ((0,), 0, None),
        ((0,), 0, 3),
        ((3, 0), 0, 4),  # E = 3 but nothing per row
        ((0, 5, 3), 1, 6),  # empty outer
        ((2, 0, 3), 1, 4),  # E = 0 in the middle
        ((2, 0, 3), -2, None),
    ],
    ids=str,
)
def test_empty_shapes(
    shape: tuple, dim: int, dim_size: Optional[int], dtype: torch.dtype, device: str
) -> None:
    torch.manual_seed(3)
    src = make_src(shape, dtype, device)
    E = shape[dim]
    N = dim_size if dim_size is not None else 1
    index = make_index(E, N, device)
    out = torchplug.scatter_sum(src, index, dim, dim_size=dim_size)
    assert_scatter_close(out, src, index, dim, dim_size=dim_size)


# --------------------------------------------------------------------------- layouts


def strided_src(kind: str, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, int]:
    """Non-contiguous src tensors and the dim to reduce."""
    if kind == "transposed":
        return make_src((6, 45), dtype, device).t(), 0  # [45, 6], dim 0
    if kind == "transposed-dim1":
        return make_src((45, 6), dtype, device).t(), 1  # [6, 45], dim 1
    if kind == "sliced":
        return make_src((90, 13), dtype, device)[::2, 1:12:3], 0
    if kind == "offset":
        return make_src((46, 5), dtype, device)[1:], 0
    if kind == "permuted-3d":
        return make_src((5, 4, 40), dtype, device).permute(2, 0, 1), 0  # [40, 5, 4]
    if kind == "expanded":
        return make_src((45, 1), dtype, device).expand(45, 4), 0
    raise AssertionError(kind)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "kind", ["transposed", "transposed-dim1", "sliced", "offset", "permuted-3d", "expanded"]
)
@pytest.mark.parametrize("full_index", [False, True], ids=["index1d", "indexfull"])
def test_non_contiguous_src(
    kind: str, full_index: bool, dtype: torch.dtype, device: str, assert_same_result
) -> None:
    torch.manual_seed(4)
    src, dim = strided_src(kind, dtype, device)
    assert not src.is_contiguous() or src.storage_offset() > 0
    N = 7
    if full_index:
        # A full-shape index that is itself non-contiguous (all dims reversed).
        index = torch.randint(0, N, tuple(reversed(src.shape)), device=device)
        index = index.permute(*reversed(range(src.dim())))
        assert not index.is_contiguous()
    else:
        index = make_index(2 * src.size(dim), N, device)[::2]  # non-contiguous index too
    out = torchplug.scatter_sum(src, index, dim)
    assert_scatter_close(out, src, index, dim)
    # Same answer as the contiguous copies (bit for bit on CPU).
    again = torchplug.scatter_sum(src.contiguous(), index.contiguous(), dim)
    assert_same_result(out, again)


# --------------------------------------------------------------------------- index distributions

LAYOUTS = [
    pytest.param((1000,), 0, False, id="inner1"),  # one element per row
    pytest.param((1000, 5), 0, False, id="inner5"),  # rows of 5
    pytest.param((3, 1000, 4), 1, False, id="outer3-inner4"),
    pytest.param((1000, 5), 0, True, id="full"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("dist", ["random", "sorted", "skewed", "all-equal"])
@pytest.mark.parametrize("shape, dim, full", LAYOUTS)
def test_index_distributions(
    shape: tuple, dim: int, full: bool, dist: str, dtype: torch.dtype, device: str
) -> None:
    torch.manual_seed(5)
    src = make_src(shape, dtype, device)
    N = 37
    E = shape[dim]
    if full:
        # Every column its own distribution of the same kind.
        cols = [make_index(E, N, device, dist) for _ in range(shape[1])]
        index = torch.stack(cols, dim=1)
    else:
        index = make_index(E, N, device, dist)
    out = torchplug.scatter_sum(src, index, dim, dim_size=N)
    assert_scatter_close(out, src, index, dim, dim_size=N)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dist", ["random", "all-equal"])
@pytest.mark.parametrize(
    "E, F, N",
    [
        pytest.param(200_000, 1, 1000, id="one-column"),
        pytest.param(200_000, 16, 1000, id="private-outputs"),
        pytest.param(50_000, 40, 1000, id="column-slices-with-tail"),
        pytest.param(20_000, 100, 300, id="column-slices-odd-width"),
        pytest.param(50_000, 8, 40_000, id="row-ownership"),
    ],
)
def test_large_multithreaded(E: int, F: int, N: int, dist: str, dtype: torch.dtype, device: str) -> None:
    """Big enough for the CPU kernel to split the work across threads, one case
    per schedule it picks (see ops/scatter/scatter_cpu.cpp)."""
    torch.manual_seed(6)
    src = make_src((E, F), dtype, device)
    index = make_index(E, N, device, dist)
    out = torchplug.scatter_sum(src, index, 0, dim_size=N)
    assert_scatter_close(out, src, index, 0, dim_size=N)


# The CPU kernel's bucket schedule (ops/scatter/scatter_cpu.cpp) runs when the
# output takes more than 32 MB (in the accumulation dtype) and a source row at
# least 128 bytes: 140K output rows of 64 float32 (or float accumulators of
# float16/bfloat16) take 36 MB. A third of the rows is never indexed, so whole
# buckets stay empty; the index repeats rows, and ends before the output does.
BUCKET_E, BUCKET_F, BUCKET_N = 150_000, 64, 140_000


def bucket_index(E: int, N: int) -> torch.Tensor:
    index = torch.randint(0, 2 * N // 3, (E,))
    return torch.where(index >= N // 3, index - N // 3 + N // 2, index)  # skips [N/3, N/2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64], ids=str)
def test_cpu_bucket_schedule(dtype: torch.dtype) -> None:
    torch.manual_seed(10)
    src = make_src((BUCKET_E, BUCKET_F), dtype, "cpu")
    index = bucket_index(BUCKET_E, BUCKET_N)
    out = torchplug.scatter_sum(src, index, 0, dim_size=BUCKET_N)
    assert_scatter_close(out, src, index, 0, dim_size=BUCKET_N)
    assert not out[BUCKET_N // 3 : BUCKET_N // 2].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cpu_bucket_schedule_out_accumulates(dtype: torch.dtype) -> None:
    torch.manual_seed(11)
    src = make_src((BUCKET_E, BUCKET_F), dtype, "cpu")
    index = bucket_index(BUCKET_E, BUCKET_N)
    out = make_src((BUCKET_N, BUCKET_F), dtype, "cpu")
    before = out.clone()
    torchplug.scatter_sum(src, index, 0, out=out)
    assert_scatter_close(out, src, index, 0, out=before)


def test_cpu_bucket_schedule_outer() -> None:
    """dim=1 of a 3-D src: every bucket adds into two output slices."""
    torch.manual_seed(12)
    src = make_src((2, BUCKET_E, BUCKET_F // 2), torch.float32, "cpu")
    index = bucket_index(BUCKET_E, BUCKET_N)
    out = torchplug.scatter_sum(src, index, 1, dim_size=BUCKET_N)
    assert_scatter_close(out, src, index, 1, dim_size=BUCKET_N)


def test_cpu_bucket_schedule_deterministic() -> None:
    """Repeated calls agree bit for bit, and so do one thread and several: each
    output row adds its source rows in source order either way."""
    torch.manual_seed(13)
    src = make_src((BUCKET_E, BUCKET_F), torch.float32, "cpu")
    index = bucket_index(BUCKET_E, BUCKET_N)
    first = torchplug.scatter_sum(src, index, 0, dim_size=BUCKET_N)
    for _ in range(2):
        torch.testing.assert_close(torchplug.scatter_sum(src, index, 0, dim_size=BUCKET_N), first, rtol=0, atol=0)
    with cpu_threads(1):
        one_thread = torchplug.scatter_sum(src, index, 0, dim_size=BUCKET_N)
    torch.testing.assert_close(one_thread, first, rtol=0, atol=0)


# Wide rows (64 float32 values, 256 bytes) into few output rows, with several
# CPU threads: each thread sums its share of the sources into a private copy of
# the output, and the copies are added up.
@pytest.mark.parametrize("dist", ["random", "sorted", "skewed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_cpu_wide_rows_into_few_outputs(dist: str, dtype: torch.dtype) -> None:
    torch.manual_seed(14)
    E, F, N = 60_000, 64, 700
    src = make_src((E, F), dtype, "cpu")
    index = make_index(E, N, "cpu", dist)
    with cpu_threads(max(2, torch.get_num_threads())):
        out = torchplug.scatter_sum(src, index, 0, dim_size=N)
        assert_scatter_close(out, src, index, 0, dim_size=N)
        torch.testing.assert_close(torchplug.scatter_sum(src, index, 0, dim_size=N), out, rtol=0, atol=0)
        start = make_src((N, F), dtype, "cpu")
        accumulated = start.clone()
        torchplug.scatter_sum(src, index, 0, out=accumulated)
        assert_scatter_close(accumulated, src, index, 0, out=start)
        wide = make_src((2, E, F // 2), dtype, "cpu")
        assert_scatter_close(torchplug.scatter_sum(wide, index, 1, dim_size=N), wide, index, 1, dim_size=N)


def _one_thread_and_several(src: torch.Tensor, index: torch.Tensor, N: int, threads: int):
    with cpu_threads(1):
        one_thread = torchplug.scatter_sum(src, index, 1, dim_size=N)
    with cpu_threads(threads):
        several = torchplug.scatter_sum(src, index, 1, dim_size=N)
    return one_thread, several


# Wide rows into many output rows (fewer than four sources each), with several
# CPU threads: each thread owns a range of output rows cut to balance the
# source rows (sorted, and random at F=256), or adds its own 64-byte column
# slice of every row (random at F=64, and where one row gets more than a
# thread's share: skewed, all-equal). Either way every output row adds its
# sources in source order, so the result has the same bits as one thread's.
@pytest.mark.parametrize("dist", ["random", "sorted", "skewed", "all-equal"])
@pytest.mark.parametrize("outer", [1, 3])
@pytest.mark.parametrize("F", [64, 256])
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_cpu_wide_rows_many_outputs(dist: str, outer: int, F: int, threads: int) -> None:
    torch.manual_seed(15)
    E, N = 2_000, 1_000
    src = make_src((outer, E, F), torch.float32, "cpu")
    index = make_index(E, N, "cpu", dist)
    one_thread, out = _one_thread_and_several(src, index, N, threads)
    assert_scatter_close(out, src, index, 1, dim_size=N)
    torch.testing.assert_close(out, one_thread, rtol=0, atol=0)


# Fewer source rows than threads, each very wide: no cut of the output rows
# keeps every thread busy, so column slices run.
@pytest.mark.parametrize("E", [1, 3])
@pytest.mark.parametrize("threads", [2, 4])
def test_cpu_few_wide_source_rows(E: int, threads: int) -> None:
    torch.manual_seed(16)
    F, N = 16_384, 10
    src = make_src((1, E, F), torch.float32, "cpu")
    index = torch.arange(E).sort().values * 3
    one_thread, out = _one_thread_and_several(src, index, N, threads)
    assert_scatter_close(out, src, index, 1, dim_size=N)
    torch.testing.assert_close(out, one_thread, rtol=0, atol=0)


def test_large_full_index_multithreaded(device: str) -> None:
    torch.manual_seed(7)
    E, F, N = 100_000, 16, 500
    src = make_src((E, F), torch.float32, device)
    index = torch.randint(0, N, (E, F), device=device)
    out = torchplug.scatter_sum(src, index, 0, dim_size=N)
    assert_scatter_close(out, src, index, 0, dim_size=N)


def test_cpu_deterministic() -> None:
    """The CPU kernel never races: repeated calls agree bit for bit."""
    torch.manual_seed(8)
    src = make_src((100_000, 8), torch.float32, "cpu")
    index = make_index(100_000, 300, "cpu")
    first = torchplug.scatter_sum(src, index, 0, dim_size=300)
    for _ in range(3):
        torch.testing.assert_close(torchplug.scatter_sum(src, index, 0, dim_size=300), first, rtol=0, atol=0)


#: (outer slices, E, N) along dim=-1: few slots, many slices (on CUDA the
#: ordered bins where a block's shared memory allows, the ordered segments
#: otherwise: N=4096 of float64, and of float32 min and max).
LAST_DIM_CASES = [(3, 12_411, 300), (700, 32_773, 300), (2, 65_543, 4096)]


def last_dim_index(layout: str, E: int, N: int, g: torch.Generator) -> torch.Tensor:
    """A CPU index: det_index's layouts, every other slot left empty, or
    random with every 97th value outside [0, N) (CUDA leaves those out)."""
    if layout == "every-other-slot":
        return 2 * torch.randint(0, N // 2, (E,), generator=g)
    if layout == "strays":
        index = torch.randint(0, N, (E,), generator=g)
        stray = torch.arange(0, E, 97)
        index[stray] = torch.where(stray % 2 == 0, -1, N)
        return index
    return det_index(layout, E, N, g)


def last_dim_reference(src: torch.Tensor, index: torch.Tensor, N: int, reduce: str) -> tuple:
    """torch_scatter's result along the last dim in float64 (an empty slot
    gives 0, 1 for mul), and min's and max's arg: the smallest position
    holding each slot's value, E for an empty slot. Values outside [0, N)
    go to an extra slot, dropped."""
    wide = src.double()
    E = wide.shape[-1]
    slots = torch.where((index >= 0) & (index < N), index, N).view(1, -1).expand_as(wide)
    start = wide.new_ones if reduce == "mul" else wide.new_zeros
    name = {"sum": "sum", "mean": "mean", "mul": "prod", "min": "amin", "max": "amax"}[reduce]
    values = start(wide.shape[0], N + 1).scatter_reduce(1, slots, wide, name, include_self=False)
    positions = torch.arange(E).expand_as(wide)
    candidates = torch.where(wide == values.gather(1, slots), positions, E)
    arg = torch.full_like(values, E, dtype=torch.long).scatter_reduce(1, slots, candidates, "amin")
    return values[:, :N], arg[:, :N]


@pytest.mark.parametrize("mode", ["deterministic", "default"])
@pytest.mark.parametrize("layout", ["random", "every-other-slot", "power-law", "strays"])
@pytest.mark.parametrize("outer, E, N", LAST_DIM_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduce", ["sum", "mean", "mul", "min", "max"])
def test_along_the_last_dim(
    reduce: str, dtype: torch.dtype, outer: int, E: int, N: int, layout: str, mode: str, cuda_device: str
) -> None:
    """Along dim=-1 of src [outer, E] into N slots, in deterministic mode and
    the default path (whose mul, min and max take the ordered bins too, and
    mean its counts from shared memory): the values against a float64 reference,
    min's and max's arg the first position holding the value, a second call
    bitwise the same, and into out= a -0.0 that no source reaches stays
    -0.0. Integer values (powers of two for mul): every sum and product is
    exact, in any order."""
    g = torch.Generator().manual_seed(E + N)
    index = last_dim_index(layout, E, N, g)
    if reduce == "mul":
        picks = torch.multinomial(torch.tensor([0.02, 0.96, 0.02]), outer * E, replacement=True, generator=g)
        src = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)[picks].view(outer, E)
    else:
        src = torch.randint(-50, 51, (outer, E), generator=g).double()
    want, want_arg = last_dim_reference(src, index, N, reduce)
    src_d, index_d = src.to(cuda_device, dtype), index.to(cuda_device)
    op = getattr(torchplug, f"scatter_{reduce}")
    in_mode = deterministic_algorithms if mode == "deterministic" else contextlib.nullcontext
    with in_mode():
        first, again = op(src_d, index_d, -1, dim_size=N), op(src_d, index_d, -1, dim_size=N)
    if reduce in ("min", "max"):
        assert torch.equal(first[1].cpu(), want_arg)
        assert_bitwise(again[1], first[1])
        first, again = first[0], again[0]
    torch.testing.assert_close(first.cpu(), want.to(dtype))
    assert_bitwise(again, first)
    if reduce == "sum":
        out = torch.full((outer, N), -0.0, dtype=dtype, device=cuda_device)
        with in_mode():
            torchplug.scatter_sum(src_d, index_d, -1, out=out)
        torch.testing.assert_close(out.cpu(), want.to(dtype))
        reached = torch.bincount(index[(index >= 0) & (index < N)], minlength=N) > 0
        assert torch.signbit(out[:, ~reached.to(cuda_device)]).all()


@pytest.mark.parametrize(
    "reduce, mode", [("sum", "deterministic"), ("mul", "default"), ("min", "default"), ("max", "default")]
)
def test_along_the_last_dim_takes_the_ordered_bins(reduce: str, mode: str, cuda_device: str) -> None:
    """The bench's dim=-1 shape (a thousand slots, many slices) takes the
    ordered bins in deterministic mode, and for mul, min and max by default."""
    src = torch.randn(256, 20_000, device=cuda_device)
    index = torch.randint(0, 1000, (20_000,), device=cuda_device)
    activities = [torch.profiler.ProfilerActivity.CUDA]
    in_mode = deterministic_algorithms if mode == "deterministic" else contextlib.nullcontext
    with in_mode(), torch.profiler.profile(activities=activities) as profile:
        getattr(torchplug, f"scatter_{reduce}")(src, index, -1, dim_size=1000)
        torch.cuda.synchronize()
    assert any("ordered_bins_kernel" in event.name for event in profile.events())


def last_dim_reference_into(base: torch.Tensor, src: torch.Tensor, index: torch.Tensor, reduce: str) -> tuple:
    """torch_scatter's result along the last dim into out=base (its values
    take part; mean: no out=, integers floor-divided) in float64, or int64
    for integers, and min's and max's arg: the smallest position whose
    source holds the value (a NaN holds a NaN), E where none does (out's own
    value won, or no source came). A NaN source makes its slot NaN. Values
    outside [0, N) are dropped."""
    wide_type = torch.float64 if src.dtype.is_floating_point else torch.int64
    wide, base_wide = src.to(wide_type), base.to(wide_type)
    outer, E = wide.shape
    N = base.shape[-1]
    slots = torch.where((index >= 0) & (index < N), index, N).view(1, -1).expand_as(wide)
    extra = torch.cat([base_wide, base_wide.new_zeros(outer, 1)], dim=1)
    if reduce == "mean":
        total = base_wide.new_zeros(outer, N + 1).scatter_add(1, slots, wide)
        count = base_wide.new_zeros(outer, N + 1).scatter_add(1, slots, torch.ones_like(wide))
        mean = total.div(count.clamp(min=1), rounding_mode=None if total.is_floating_point() else "floor")
        return mean[:, :N], None
    if reduce == "mul":
        return extra.scatter_reduce(1, slots, wide, "prod", include_self=True)[:, :N], None
    nan = wide.isnan()
    if wide.is_floating_point():  # NaN wins: the others reduced without it, then NaN where one came
        wide = wide.masked_fill(nan, float("inf") if reduce == "min" else float("-inf"))
    values = extra.scatter_reduce(1, slots, wide, {"min": "amin", "max": "amax"}[reduce], include_self=True)
    has_nan = torch.zeros_like(extra, dtype=torch.long).scatter_reduce(1, slots, nan.long(), "amax") > 0
    values = values.masked_fill(has_nan, float("nan")) if values.is_floating_point() else values
    picked = values.gather(1, slots)
    holds = (wide == picked) | (nan & picked.isnan())  # wide: NaN replaced, so NaN holds only NaN
    candidates = torch.where(holds, torch.arange(E).expand_as(wide), E)
    arg = torch.full_like(extra, E, dtype=torch.long).scatter_reduce(1, slots, candidates, "amin")
    return values[:, :N], arg[:, :N]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("reduce", ["mean", "mul", "min", "max"])
def test_along_the_last_dim_into_out(reduce: str, dtype: torch.dtype, device: str) -> None:
    """Along dim=-1 of src [5, 4099] into 200 slots (on CUDA the ordered bins
    for mul, min and max, shared counts for mean, checked by the kernels that
    ran) in every type: into out= holding values that sometimes win (mean: a
    fresh output), with strays outside [0, N) on CUDA and, for min and max
    of floating types, NaN sources; values exact (mean: rounded once,
    integers floor-divided)."""
    outer, E, N = 5, 4099, 200
    on_cuda = device.startswith("cuda")
    g = torch.Generator().manual_seed(E)
    index = last_dim_index("strays" if on_cuda else "random", E, N, g)  # the CPU raises on strays
    if reduce == "mul":
        factors = torch.tensor([0.5, 1.0, 2.0]) if dtype.is_floating_point else torch.tensor([-1.0, 1.0, 2.0])
        weights = torch.tensor([0.03, 0.94, 0.03])
        src = factors[torch.multinomial(weights, outer * E, replacement=True, generator=g)].view(outer, E)
        base = factors[torch.multinomial(weights, outer * N, replacement=True, generator=g)].view(outer, N)
    else:
        src = torch.randint(-50, 51, (outer, E), generator=g).double()
        base = torch.randint(-60, 61, (outer, N), generator=g).double()
        if reduce in ("min", "max") and dtype.is_floating_point:
            src[:, 5::613] = float("nan")
    src, base = src.to(dtype), base.to(dtype)
    want, want_arg = last_dim_reference_into(base, src, index, reduce)
    op = getattr(torchplug, f"scatter_{reduce}")
    src_d, index_d = src.to(device), index.to(device)
    out = base.to(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA] if on_cuda else []) as profile:
        got = op(src_d, index_d, -1, dim_size=N) if reduce == "mean" else op(src_d, index_d, -1, out=out)
    if reduce == "mean":
        torch.testing.assert_close(got.cpu(), want.to(dtype))
    else:
        torch.testing.assert_close(out.cpu(), want.to(dtype), rtol=0, atol=0, equal_nan=True)
    if reduce in ("min", "max"):
        assert torch.equal(got[1].cpu(), want_arg)
    if on_cuda:
        kernel = "shared_counts_kernel" if reduce == "mean" else "ordered_bins_kernel"
        assert any(kernel in event.name for event in profile.events())


# --------------------------------------------------------------------------- out=


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_out_keeps_negative_zero(reduce: str, threads: int) -> None:
    """A -0.0 of out= that no source reaches stays -0.0, as in index_add_,
    also when each thread sums into a copy of the output that is added into
    out at the end (two threads, output rows with four sources or more)."""
    g = torch.Generator().manual_seed(11)
    E, F, N = 40_000, 4, 1000
    src = torch.randn(E, F, generator=g)
    index = 2 * torch.randint(0, N // 2, (E,), generator=g)  # the odd rows get nothing
    out = torch.randn(N, F, generator=g)
    out[1::2] = -0.0
    want = out.double().index_add(0, index, src.double())
    with cpu_threads(threads):
        getattr(torchplug, f"scatter_{reduce}")(src, index, 0, out=out)
    assert torch.signbit(out[1::2]).all()
    if reduce == "sum":
        torch.testing.assert_close(out, want.float(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim, kind, N", CASES[::2])
def test_out_accumulates(
    shape: tuple, dim: int, kind: str, N: int, dtype: torch.dtype, device: str, assert_same_result
) -> None:
    torch.manual_seed(9)
    src = make_src(shape, dtype, device)
    index = index_for(kind, shape, dim, N, device)
    out_shape = list(shape)
    out_shape[dim % len(shape)] = N + 2
    out = make_src(tuple(out_shape), dtype, device)
    before = out.clone()
    ptr = out.data_ptr()
    result = torchplug.scatter_sum(src, index, dim, out=out)
    assert result is out
    assert result.data_ptr() == ptr
    assert_scatter_close(out, src, index, dim, out=before)
    # Same through the schema-level in-place op and through scatter(reduce="sum").
    out2 = before.clone()
    assert torch.ops.torchplug.scatter_sum_(out2, src, index, dim) is None
    assert_same_result(out2, out)
    out3 = before.clone()
    assert torchplug.scatter(src, index, dim, out=out3, reduce="sum") is out3
    assert_same_result(out3, out)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["transposed", "sliced", "offset"])
def test_out_non_contiguous(layout: str, dtype: torch.dtype, device: str) -> None:
    """A strided out is written in place: the caller's tensor (and its base) see the sums."""
    torch.manual_seed(10)
    E, F, N = 60, 5, 9
    src = make_src((E, F), dtype, device)
    index = make_index(E, N, device)
    if layout == "transposed":
        base = make_src((F, N), dtype, device)
        out = base.t()
    elif layout == "sliced":
        base = make_src((2 * N, F + 3), dtype, device)
        out = base[::2, 1 : F + 1]
    else:
        base = make_src((N * F + 1,), dtype, device)
        out = base[1:].view(N, F)
    assert not out.is_contiguous() or out.storage_offset() > 0
    base_before = base.clone()
    before = out.clone()
    result = torchplug.scatter_sum(src, index, 0, out=out)
    assert result is out
    assert_scatter_close(out, src, index, 0, out=before)
    # The write went through the view into the caller's storage, and only there.
    expected_base = base_before.clone()
    if layout == "transposed":
        expected_base.t().copy_(out)
    elif layout == "sliced":
        expected_base[::2, 1 : F + 1].copy_(out)
    else:
        expected_base[1:].view(N, F).copy_(out)
    torch.testing.assert_close(base, expected_base, rtol=0, atol=0)


def test_out_dim_size_disagrees(device: str) -> None:
    torch.manual_seed(11)
    src = make_src((10, 3), torch.float32, device)
    index = make_index(10, 4, device)
    out = make_src((4, 3), torch.float32, device)
    with pytest.raises(ValueError, match="dim_size"):
        torchplug.scatter_sum(src, index, 0, out=out, dim_size=5)
    before = out.clone()
    torchplug.scatter_sum(src, index, 0, out=out, dim_size=4)
    assert_scatter_close(out, src, index, 0, out=before)


# --------------------------------------------------------------------------- autograd


GRAD_CASES = [
    pytest.param((12, 3), 0, "1d", 5, id="2d-dim0"),
    pytest.param((3, 12), -1, "1d", 5, id="2d-dim-1"),
    pytest.param((12, 3), 0, "full", 5, id="2d-full"),
    pytest.param((2, 12, 3), 1, "BE", 5, id="3d-BE"),
    pytest.param((12, 2, 3), 0, "E1", 5, id="3d-E1"),
]


@pytest.mark.parametrize("shape, dim, kind, N", GRAD_CASES)
def test_gradcheck(shape: tuple, dim: int, kind: str, N: int, device: str) -> None:
    torch.manual_seed(12)
    src = make_src(shape, torch.float64, device).requires_grad_()
    index = index_for(kind, shape, dim, N, device)

    def fn(s: torch.Tensor) -> torch.Tensor:
        return torchplug.scatter_sum(s, index, dim, dim_size=N + 1)

    assert gradcheck(fn, (src,))
    assert gradgradcheck(fn, (src,))


@pytest.mark.parametrize("shape, dim, kind, N", GRAD_CASES)
def test_gradcheck_out(shape: tuple, dim: int, kind: str, N: int, device: str) -> None:
    torch.manual_seed(13)
    src = make_src(shape, torch.float64, device).requires_grad_()
    index = index_for(kind, shape, dim, N, device)
    out_shape = list(shape)
    out_shape[dim % len(shape)] = N
    base = make_src(tuple(out_shape), torch.float64, device).requires_grad_()

    def fn(b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torchplug.scatter_sum(s, index, dim, out=b.clone())

    assert gradcheck(fn, (base, src))
    assert gradgradcheck(fn, (base, src))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim, kind, N", GRAD_CASES)
def test_grad_matches_torch(
    shape: tuple, dim: int, kind: str, N: int, dtype: torch.dtype, device: str
) -> None:
    """grad of src is grad_out gathered at index, as for index_add/scatter_add."""
    torch.manual_seed(14)
    src = make_src(shape, dtype, device).requires_grad_()
    index = index_for(kind, shape, dim, N, device)
    out = torchplug.scatter_sum(src, index, dim, dim_size=N)
    grad_out = make_src(tuple(out.shape), dtype, device)
    (got,) = torch.autograd.grad(out, (src,), grad_out)
    ref_src = src.detach().clone().requires_grad_()
    full = broadcast_index(index, ref_src, dim)
    ref = torch.zeros_like(out).scatter_add(dim % src.dim(), full, ref_src)
    (want,) = torch.autograd.grad(ref, (ref_src,), grad_out)
    assert got.dtype == dtype and got.shape == src.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0)  # a gather: exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_autograd_through_out(dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(15)
    E, F, N = 20, 4, 6
    index = make_index(E, N, device)
    base = make_src((N, F), dtype, device).requires_grad_()
    src = make_src((E, F), dtype, device).requires_grad_()
    out = base.clone()
    result = torchplug.scatter_sum(src, index, 0, out=out)
    assert result is out and out.requires_grad
    grad_out = make_src((N, F), dtype, device)
    g_base, g_src = torch.autograd.grad(result, (base, src), grad_out)
    # Reference: the out-of-place index_add has the same derivatives.
    rb = base.detach().clone().requires_grad_()
    rs = src.detach().clone().requires_grad_()
    want_b, want_s = torch.autograd.grad(rb.index_add(0, index, rs), (rb, rs), grad_out)
    torch.testing.assert_close(g_base, grad_out, rtol=0, atol=0)
    torch.testing.assert_close(g_base, want_b, rtol=0, atol=0)
    torch.testing.assert_close(g_src, want_s, rtol=0, atol=0)


def test_autograd_out_without_grad(device: str) -> None:
    """out needs no grad of its own: the result still carries src's gradient."""
    torch.manual_seed(16)
    index = make_index(15, 4, device)
    src = make_src((15, 3), torch.float64, device).requires_grad_()
    out = make_src((4, 3), torch.float64, device)
    result = torchplug.scatter_sum(src, index, 0, out=out)
    assert result.requires_grad
    grad_out = make_src((4, 3), torch.float64, device)
    (g,) = torch.autograd.grad(result, (src,), grad_out)
    torch.testing.assert_close(g, grad_out[index], rtol=0, atol=0)


def test_autograd_through_non_contiguous_out(device: str) -> None:
    """out= on a view of a non-leaf: the in-place write reaches the base's graph."""
    torch.manual_seed(17)
    E, F, N = 18, 3, 5
    index = make_index(E, N, device)
    leaf = make_src((F, N), torch.float64, device).requires_grad_()
    src = make_src((E, F), torch.float64, device).requires_grad_()
    weights = make_src((F, N), torch.float64, device)

    base = leaf * 2
    torchplug.scatter_sum(src, index, 0, out=base.t())
    loss = (base * weights).sum()
    g_leaf, g_src = torch.autograd.grad(loss, (leaf, src))

    rl = leaf.detach().clone().requires_grad_()
    rs = src.detach().clone().requires_grad_()
    rbase = rl * 2
    rbase.t().index_add_(0, index, rs)
    want_l, want_s = torch.autograd.grad((rbase * weights).sum(), (rl, rs))
    torch.testing.assert_close(base.detach(), rbase.detach())
    torch.testing.assert_close(g_leaf, want_l, rtol=0, atol=0)
    torch.testing.assert_close(g_src, want_s, rtol=0, atol=0)


def test_inplace_on_leaf_requiring_grad_raises_and_leaves_out_untouched(device: str) -> None:
    """Like PyTorch's own in-place ops (``leaf.add_(1)``), the refused call writes nothing."""
    torch.manual_seed(18)
    index = make_index(10, 4, device)
    src = make_src((10, 3), torch.float32, device)
    out = make_src((4, 3), torch.float32, device).requires_grad_()
    before = out.detach().clone()
    with pytest.raises(RuntimeError, match="leaf"):
        torchplug.scatter_sum(src, index, 0, out=out)
    torch.testing.assert_close(out.detach(), before, rtol=0, atol=0)


def test_inplace_without_grad_invalidates_saved_out(device: str) -> None:
    """Without a gradient to record the op skips autograd's node, but still
    bumps out's version, as PyTorch's in-place ops do: a backward through an op
    that saved out's old values is refused, not silently wrong."""
    torch.manual_seed(19)
    index = make_index(12, 4, device)
    src = make_src((12, 3), torch.float64, device)
    out = make_src((4, 3), torch.float64, device)
    weight = make_src((4, 3), torch.float64, device).requires_grad_()
    product = weight * out  # saves out for weight's gradient
    version = out._version
    torchplug.scatter_sum(src, index, 0, out=out)
    assert out._version == version + 1 and not out.requires_grad and out.grad_fn is None
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        product.sum().backward()


def test_inplace_on_leaf_requiring_grad_under_no_grad(device: str) -> None:
    """Under no_grad a leaf that requires grad may be written (as ``leaf.add_``
    may): it stays a leaf, once bumped, holding the sums."""
    torch.manual_seed(21)
    index = make_index(12, 4, device)
    src = make_src((12, 3), torch.float64, device)
    out = make_src((4, 3), torch.float64, device).requires_grad_()
    want = out.detach().clone().index_add_(0, index, src)
    version = out._version
    with torch.no_grad():
        torchplug.scatter_sum(src, index, 0, out=out)
    assert out._version == version + 1 and out.requires_grad and out.is_leaf
    torch.testing.assert_close(out.detach(), want)


@pytest.mark.parametrize("grad_mode", ["enabled", "no_grad"])
def test_graph_only_when_grad_is_recorded(grad_mode: str, device: str) -> None:
    """A src that requires grad gets a node only where grad mode records one; the
    sums are the same either way."""
    torch.manual_seed(20)
    index = make_index(12, 4, device)
    src = make_src((12, 3), torch.float64, device).requires_grad_()
    with torch.set_grad_enabled(grad_mode == "enabled"):
        result = torchplug.scatter_sum(src, index, 0, dim_size=4)
    want = torch.zeros(4, 3, dtype=torch.float64, device=device).index_add_(0, index, src.detach())
    torch.testing.assert_close(result.detach(), want)
    assert result.requires_grad == (grad_mode == "enabled")
    assert (result.grad_fn is not None) == (grad_mode == "enabled")


def test_forward_mode_ad_is_refused_before_writing(device: str) -> None:
    """Forward-mode AD is not supported: a dual input (which need not require
    grad) raises, naming the argument, rather than return a result without its
    tangent; a dual out is left as it was."""
    index = make_index(12, 4, device)
    src = make_src((12, 3), torch.float64, device)
    before = make_src((4, 3), torch.float64, device)
    with fwAD.dual_level():
        dual = fwAD.make_dual(src, torch.ones_like(src))
        with pytest.raises(RuntimeError, match=f"{OP}: argument 'src' .*forward-mode"):
            torchplug.scatter_sum(dual, index, 0, dim_size=4)
        out = fwAD.make_dual(before.clone(), torch.ones_like(before))
        with pytest.raises(RuntimeError, match=f"{OP}: argument 'out' .*forward-mode"):
            torchplug.scatter_sum(src, index, 0, out=out)
        torch.testing.assert_close(fwAD.unpack_dual(out).primal, before, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_functorch_transforms(device: str) -> None:
    """vmap runs per sample (PyTorch's fallback for ops without a batching
    rule), whether or not src requires grad; grad and jvp transforms are refused
    as torch::autograd::Function refuses them, even over a constant src."""
    index = make_index(12, 4, device)
    batch = make_src((2, 12, 3), torch.float64, device)
    want = torch.stack([torch.zeros(4, 3, dtype=batch.dtype, device=device).index_add_(0, index, b)
                        for b in batch])
    for src in (batch, batch.clone().requires_grad_()):
        got = torch.vmap(lambda s: torchplug.scatter_sum(s, index, 0, dim_size=4))(src)
        torch.testing.assert_close(got.detach(), want)
    weight = make_src((4, 3), torch.float64, device)
    with pytest.raises(RuntimeError, match="functorch transforms"):
        torch.func.grad(lambda w: (w * torchplug.scatter_sum(batch[0], index, 0, dim_size=4)).sum())(
            weight
        )


# --------------------------------------------------------------------------- meta


def test_meta_needs_dim_size() -> None:
    src = torch.empty((10, 3), device="meta")
    index = torch.empty((10,), dtype=torch.long, device="meta")
    out = torchplug.scatter_sum(src, index, 0, dim_size=7)
    assert out.shape == (7, 3) and out.device.type == "meta" and out.dtype == src.dtype
    with pytest.raises(RuntimeError, match=f"{OP}.*dim_size"):
        torchplug.scatter_sum(src, index, 0)


@pytest.mark.parametrize("case", ["index-shape", "out-shape"])
def test_meta_rejects_what_cpu_rejects(case: str) -> None:
    """The shape-only kernels (what torch.compile traces with) refuse the same bad
    shapes as the real kernels. Inference mode reaches them without the autograd
    kernel in front."""
    src = make_src((10, 3), torch.float32, "cpu")
    index = make_index(10, 4, "cpu")
    if case == "index-shape":
        index = index[:7]
        run = lambda s, i: torch.ops.torchplug.scatter_sum(s, i, 0, 4)  # noqa: E731
        arg = "index"
    else:
        run = lambda s, i: torch.ops.torchplug.scatter_sum_(  # noqa: E731
            torch.zeros((5, 9), device=s.device), s, i, 0
        )
        arg = "out"
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match=f"{OP}.*'{arg}'"):
            run(src, index)  # the CPU kernel
        with pytest.raises(RuntimeError, match=f"{OP}.*'{arg}'"):
            run(src.to("meta"), index.to("meta"))


# --------------------------------------------------------------------------- errors


def _args(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(19)
    return make_src((10, 3), torch.float32, device), make_index(10, 4, device)


@pytest.mark.parametrize("bad", [torch.float32, torch.int32, torch.int16], ids=str)
def test_rejects_index_dtype(bad: torch.dtype, device: str) -> None:
    src, index = _args(device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'index'.*int64"):
        torchplug.scatter_sum(src, index.to(bad), 0)
    with pytest.raises(RuntimeError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, index.to(bad), 0, out=torch.zeros(4, 3, device=device))


@pytest.mark.parametrize("bad", [torch.bool, torch.complex64, torch.uint8, torch.int8], ids=str)
def test_rejects_src_dtype(bad: torch.dtype, device: str) -> None:
    src, index = _args(device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'src'"):
        torchplug.scatter_sum(src.to(bad), index, 0)


@pytest.mark.parametrize(
    "index_shape, dim",
    [((10, 2), 0), ((9,), 0), ((10, 3, 1), 0), ((3, 10), 0), ((2, 10), 1)],
    ids=str,
)
def test_rejects_index_shape(index_shape: tuple, dim: int, device: str) -> None:
    src, _ = _args(device)
    if dim == 1:
        src = src.t()
    index = torch.randint(0, 4, index_shape, device=device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, index, dim)
    # The same shapes over an empty src, where nothing is read from the index.
    empty = src.narrow(1 - dim, 0, 0)
    with pytest.raises(RuntimeError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(empty, index, dim, dim_size=4)


# out is written in place: like PyTorch's in-place ops, scatter_sum rejects an
# out that shares memory with an input or whose elements share memory.
def test_rejects_out_sharing_memory(device: str) -> None:
    torch.manual_seed(25)
    x = make_src((40, 8), torch.float32, device)
    index = torch.randperm(40, device=device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'out' shares memory with argument 'src'"):
        torchplug.scatter_sum(x, index, 0, out=x)
    with pytest.raises(RuntimeError, match=f"{OP}.*'out' shares memory with argument 'src'"):
        torchplug.scatter_sum(x[:20], index[:20] % 20, 0, out=x[10:30])
    storage = torch.zeros(80, dtype=torch.long, device=device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'out' shares memory with argument 'index'"):
        torchplug.scatter_sum(torch.ones(50, dtype=torch.long, device=device), storage[:50], 0, out=storage[30:])
    expanded = torch.zeros(1, 8, device=device).expand(5, 8)
    with pytest.raises(RuntimeError, match=f"{OP}.*'out' has elements that share memory"):
        torchplug.scatter_sum(x, index % 5, 0, out=expanded)


def test_rejects_negative_index_cpu() -> None:
    src, index = _args("cpu")
    index[3] = -1
    with pytest.raises(IndexError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, index, 0)
    with pytest.raises(IndexError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, index, 0, dim_size=4)
    out = make_src((4, 3), torch.float32, "cpu")
    with pytest.raises(IndexError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, index, 0, out=out)


def test_rejects_too_large_index_cpu() -> None:
    src, index = _args("cpu")
    index[5] = 4
    with pytest.raises(IndexError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, index, 0, dim_size=4)
    out = make_src((4, 3), torch.float32, "cpu")
    before = out.clone()
    with pytest.raises(IndexError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, index, 0, out=out)
    torch.testing.assert_close(out, before, rtol=0, atol=0)  # untouched on failure
    full = broadcast_index(index, src, 0).clone()
    with pytest.raises(IndexError, match=f"{OP}.*'index'"):
        torchplug.scatter_sum(src, full, 0, dim_size=4)


# A sorted index (the CUDA kernels find it sorted and need no permutation) with
# rows of 0 to 300 sources, trailing rows with none, every vector width, with
# and without out=. Small integer values keep the sums exact; the half types
# are rounded once.
@pytest.mark.parametrize("F", [2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64], ids=str)
def test_sorted_narrow_rows(F: int, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(22)
    N = 1000
    degree = torch.randint(0, 12, (N,))
    degree[::7], degree[5], degree[N - 1] = 0, 300, 40
    index = torch.repeat_interleave(torch.arange(N), degree).to(device)
    src = torch.randint(-8, 9, (index.numel(), F)).to(dtype).to(device)
    base = torch.randint(-8, 9, (N + 5, F), device=device)
    assert_exact_sums(src, index, 0, base)


# Rows of more than 1024 sources (hubs on CUDA, core/reduce/cuda/hub_rows.cuh)
# among ordinary ones: sorted and shuffled, few rows (hub blocks of 32
# positions) and many, outer > 1, rows of 1, 2 and 4 values per vector, with
# and without out=. On CUDA a shuffled
# index with rows of at most 64 bytes takes the atomic rows in float32,
# float64, int32 and int64; rows of 18, 32 and 33 values keep the permutation
# there too, at each vector width. Small integer values keep the sums exact;
# the half types are rounded once.
@pytest.mark.parametrize("F", [3, 6, 8, 18, 32, 33])
@pytest.mark.parametrize("outer", [1, 3])
@pytest.mark.parametrize("N", [6, 5000], ids=["few-rows", "many-rows"])
@pytest.mark.parametrize("order", ["sorted", "shuffled"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64], ids=str
)
def test_long_rows(F: int, outer: int, N: int, order: str, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(23)
    degree = torch.randint(0, 5, (N,))
    degree[1], degree[N // 2], degree[N - 1] = 1025, 3000, 1500
    index = torch.repeat_interleave(torch.arange(N), degree)
    if order == "shuffled":
        index = index[torch.randperm(index.numel())]
    index = index.to(device)
    src = torch.randint(-3, 4, (outer, index.numel(), F)).to(dtype).to(device)
    base = torch.randint(-8, 9, (outer, N, F), device=device)
    assert_exact_sums(src, index, 1, base)


# One row of about 1024 sources, on both sides of it with the index sorted
# (one row) and not (one stray entry first), into a fresh output and with
# out= (hub limits themselves: tests/python/test_hub_rows.py).
@pytest.mark.parametrize(
    "rows",
    [[1] * 1024, [2] + [1] * 1023, [1] * 1025, [2] + [1] * 1024, [2] + [1] * 1025],
    ids=["1024", "1+1023", "1025", "1+1024", "1+1025"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_rows_at_the_long_row_limit(rows: list[int], dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(24)
    index = torch.tensor(rows, device=device)
    src = torch.randint(-3, 4, (index.numel(), 8)).to(dtype).to(device)
    base = torch.randint(-8, 9, (3, 8), device=device)
    assert_exact_sums(src, index, 0, base)


def test_cuda_out_of_range_index_is_dropped(cuda_device: str) -> None:
    """On CUDA bad index values are skipped, never written out of bounds."""
    torch.manual_seed(20)
    src = make_src((1000, 3), torch.float32, cuda_device)
    index = make_index(1000, 8, cuda_device)
    bad = index.clone()
    bad[::7] = 8
    bad[3::11] = -5
    keep = (bad >= 0) & (bad < 8)
    out = torchplug.scatter_sum(src, bad, 0, dim_size=8)
    assert_scatter_close(out, src[keep], bad[keep], 0, dim_size=8)
    torch.cuda.synchronize()  # the context is still usable
    assert_scatter_close(torchplug.scatter_sum(src, index, 0, dim_size=8), src, index, 0, dim_size=8)


# --------------------------------------------------------------------------- CUDA paths
# A 1-D index with rows of more than one value: up to a limit of source
# elements the CUDA kernel adds rows with atomics, above it it builds the CSR
# (scatter_cuda.cu, takes_atomic_rows). In float32, float64, int32 and int64,
# rows whose count of column vectors divides a block of 256 threads (float32
# vectors of 4 values, or fewer when the row or a pointer is not aligned to
# 16 bytes; one value in the other types), e.g. float32 rows of 2, 4, 8, ...,
# 1024 values or float64 rows of 2, 4, ..., 256: up to NARROW_ATOMIC_BYTES of
# source for float32 rows of at most 64 bytes, HOT_ATOMIC_BYTES for the
# others. Otherwise (float16, bfloat16, rows such as 12, 33 or 384 float32 values, or
# 20 float64 values) up to ATOMIC_LIMIT source elements and at most a
# sixteenth of it in entries. TORCHPLUG_SCATTER_ATOMIC_LIMIT, in elements,
# replaces all three (read once per process; scripts/gpu_check.sh runs this
# suite again with 0, so that every case here also takes the CSR).
NARROW_ATOMIC_BYTES = 2**28
HOT_ATOMIC_BYTES = 2**27
ATOMIC_LIMIT = 2**21
# The first two in float32 elements.
NARROW_ATOMIC_LIMIT = NARROW_ATOMIC_BYTES // 4
HOT_ATOMIC_LIMIT = HOT_ATOMIC_BYTES // 4


# Rows of 16 values: narrow in float32, wider in int64, the last limit in bfloat16.
@pytest.mark.parametrize("side", ["atomic", "csr"])
@pytest.mark.parametrize("dist", ["random", "sorted", "skewed", "all-equal"])
@pytest.mark.parametrize(
    "dtype, limit",
    [
        (torch.float32, NARROW_ATOMIC_LIMIT),
        (torch.int64, HOT_ATOMIC_BYTES // 8),
        (torch.bfloat16, ATOMIC_LIMIT),
    ],
    ids=["float32", "int64", "bfloat16"],
)
def test_cuda_either_side_of_the_atomic_limit(
    side: str, dist: str, dtype: torch.dtype, limit: int, cuda_device: str
) -> None:
    torch.manual_seed(25)
    F, N = 16, 3000
    E = limit // F + (side == "csr")
    src = make_src((E, F), dtype, cuda_device)
    index = make_index(E, N, cuda_device, dist)
    index[5::1001] = N  # out of range: skipped
    keep = index < N
    out = torchplug.scatter_sum(src, index, 0, dim_size=N)
    assert_scatter_close(out, src[keep], index[keep], 0, dim_size=N)
    base = make_src((N, F), dtype, cuda_device)
    out = base.clone()
    torchplug.scatter_sum(src, index, 0, out=out)
    assert_scatter_close(out, src[keep], index[keep], 0, out=base)


# Prints the bytes the call held beyond its output at its peak: none for the
# atomic rows in float32 and float64, a float copy of the output in bfloat16; the
# offsets for the CSR, and the E-long permutation unless rows are narrow.
_PATH_PROBE = """
import torch, torchplug
torch.manual_seed(0)
E, F, N, dtype = {E}, {F}, {N}, torch.{dtype}
src = torch.randn(E, F, device="cuda").to(dtype)
index = torch.randint(0, N, (E,), device="cuda")
want = torch.zeros(N, F, device="cuda", dtype=torch.float64).index_add_(0, index, src.double())
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
out = torchplug.scatter_sum(src, index, 0, dim_size=N)
torch.cuda.synchronize()
extra = torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()
tol = 1e-2 if dtype == torch.bfloat16 else 1e-4  # bfloat16 rounds the sums once
torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
print(extra)
"""


def _probe(E: int, limit: Optional[str], F: int = 16, N: int = 100, dtype: str = "float32"):
    env = {k: v for k, v in os.environ.items() if k != "TORCHPLUG_SCATTER_ATOMIC_LIMIT"}
    if limit is not None:
        env["TORCHPLUG_SCATTER_ATOMIC_LIMIT"] = limit
    code = _PATH_PROBE.format(E=E, F=F, N=N, dtype=dtype)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


# About ten entries per output row keep float32's rounding within the probe's
# tolerance.
@pytest.mark.parametrize(
    "limit, E, F, N, dtype, csr",
    [
        (None, NARROW_ATOMIC_LIMIT // 16, 16, NARROW_ATOMIC_LIMIT // 160, "float32", False),
        (None, NARROW_ATOMIC_LIMIT // 16 + 1, 16, NARROW_ATOMIC_LIMIT // 160, "float32", True),
        (None, HOT_ATOMIC_LIMIT // 64, 64, HOT_ATOMIC_LIMIT // 640, "float32", False),
        (None, HOT_ATOMIC_LIMIT // 64 + 1, 64, HOT_ATOMIC_LIMIT // 640, "float32", True),
        (None, HOT_ATOMIC_LIMIT // 256, 256, HOT_ATOMIC_LIMIT // 2560, "float32", False),
        (None, HOT_ATOMIC_LIMIT // 256 + 1, 256, HOT_ATOMIC_LIMIT // 2560, "float32", True),
        (None, HOT_ATOMIC_BYTES // 8 // 64, 64, HOT_ATOMIC_BYTES // 8 // 640, "float64", False),
        (None, HOT_ATOMIC_BYTES // 8 // 64 + 1, 64, HOT_ATOMIC_BYTES // 8 // 640, "float64", True),
        # Narrow float64 rows keep the limit of wider ones.
        (None, HOT_ATOMIC_BYTES // 8 // 8, 8, HOT_ATOMIC_BYTES // 8 // 80, "float64", False),
        (None, HOT_ATOMIC_BYTES // 8 // 8 + 1, 8, HOT_ATOMIC_BYTES // 8 // 80, "float64", True),
        # Rows of 33, 5 and 12 values (33, 5 and 3 column vectors): no hot row.
        (None, ATOMIC_LIMIT // 33, 33, 6000, "float32", False),
        (None, ATOMIC_LIMIT // 33 + 1, 33, 6000, "float32", True),
        # Few elements but many entries: past a sixteenth of the limit.
        (None, ATOMIC_LIMIT // 16 + 1, 5, 13000, "float32", True),
        ("0", 64, 16, 100, "float32", True),
        (str(4 * ATOMIC_LIMIT), ATOMIC_LIMIT // 16 + 1, 12, 13000, "float32", False),
        # float64 rows of 20 (20 column vectors of one value): no hot row.
        (None, ATOMIC_LIMIT // 20, 20, 6000, "float64", False),
        (None, ATOMIC_LIMIT // 20 + 1, 20, 6000, "float64", True),
        # bfloat16 accumulates in a float copy of the output: bounded too.
        (None, 64, 16, 100, "bfloat16", False),
        (None, 64, 16, ATOMIC_LIMIT // 8, "bfloat16", True),
    ],
    ids=[
        "narrow-below", "narrow-above", "hot-below", "hot-above", "wide-hot-below",
        "wide-hot-above", "f64-hot-below", "f64-hot-above", "f64-narrow-below",
        "f64-narrow-above", "below", "above",
        "many-entries", "zero", "raised", "f64-below", "f64-above", "bf16", "bf16-large-output",
    ],
)
def test_cuda_atomic_limit_picks_the_path(
    limit: Optional[str], E: int, F: int, N: int, dtype: str, csr: bool, cuda_device: str
) -> None:
    result = _probe(E, limit, F, N, dtype)
    assert result.returncode == 0, result.stderr
    extra = int(result.stdout.split()[-1])
    if dtype in ("float32", "float64"):
        assert (extra > 0) == csr
    else:  # the atomic rows hold a float copy of the output, the CSR less here
        assert (extra < N * F * 4) == csr


_PERMUTATION_PROBE = """
import torch, torchplug
torch.manual_seed(0)
E, F, N = {E}, {F}, {N}
src = torch.randn(E, F, device="cuda")
index = torch.randint(0, N, (E,), device="cuda")
activities = [torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities) as profile:
    out = torchplug.scatter_sum(src, index, 0, dim_size=N)
    torch.cuda.synchronize()
want = torch.zeros(N, F, device="cuda", dtype=torch.float64).index_add_(0, index, src.double())
torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
print(any("fill_perm_kernel" in event.name for event in profile.events()))
"""


# In the CSR (here at any size: limit 0), rows of at most 64 bytes (float32 up
# to 16 values) take the atomic rows when the counting pass finds the index
# unsorted, and never build the 4-byte-per-entry permutation (its fill kernel
# does not run); wider rows do, sorted or not. (Peak memory cannot tell: the
# hubs' partials, allocated before the device knows there are none, take
# about as much at F=16.) About ten entries per row keep float32's rounding
# within the tolerance.
@pytest.mark.parametrize("F, permutation", [(2, False), (16, False), (17, True), (32, True)])
def test_cuda_narrow_rows_need_no_permutation(F: int, permutation: bool, cuda_device: str) -> None:
    E = ATOMIC_LIMIT // 2
    env = {**os.environ, "TORCHPLUG_SCATTER_ATOMIC_LIMIT": "0"}
    code = _PERMUTATION_PROBE.format(E=E, F=F, N=E // 10)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == str(permutation)


# Half of the entries on one row, in random order: the CUDA atomic rows sum a
# warp's runs of that row in registers and add them once, where the row's
# count of column vectors divides a block: F = 2, 8, 16, 64, 128 and 256 (in
# float32 1, 2, 4, 16, 32 and 64 vectors of up to 4 values; one value per
# vector in float64, int32 and int64, where F = 64 to 256 give each lane of a
# warp its own column of one row), not F = 5 or 12. "small" takes the atomic
# rows at any width; "large", past a sixteenth of ATOMIC_LIMIT in entries,
# takes them where a hot row applies in float32, float64, int32 and int64
# (F = 2, 8, 16 and, in 4-byte types, 64; the others are past the limit of
# wider rows), and
# the CSR elsewhere: its atomic rows for narrow rows with an unsorted index,
# the permutation for the others. Two
# outer slices, so that the same row of different slices is not one
# destination. Small integer values keep the sums exact; the half types are
# rounded once.
@pytest.mark.parametrize("F", [2, 5, 8, 12, 16, 64, 128, 256])
@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16],
    ids=str,
)
def test_cuda_hub_row_in_random_order(F: int, size: str, dtype: torch.dtype, cuda_device: str) -> None:
    torch.manual_seed(27)
    E = 6000 if size == "small" else ATOMIC_LIMIT // 16 + 3
    N = E // 4
    index = torch.randint(0, N, (E,))
    index[torch.rand(E) < 0.5] = N // 3
    index[7::1009] = N  # out of range: skipped
    index = index.to(cuda_device)
    src = torch.randint(-3, 4, (2, E, F)).to(dtype).to(cuda_device)
    base = torch.randint(-8, 9, (2, N, F), device=cuda_device)
    assert_exact_sums(src, index, 1, base)


# A hub that moves every 4096 entries, half of them on it, in random order,
# with enough entries that each warp of the CUDA atomic rows (one wave of
# blocks) takes several strides: a warp's hot row goes
# cold and is let go (its sum added) for the next one. Two outer slices; rows
# of 256 float32 and 64 float64 values put each lane on a column of its own.
# Small integer values keep the sums exact.
@pytest.mark.parametrize(
    "dtype, F, E",
    [
        (torch.float32, 2, 1 << 21),
        (torch.float32, 16, 1 << 21),
        (torch.float64, 4, 1 << 21),
        (torch.int64, 8, 1 << 21),
        (torch.float32, 256, 1 << 16),
        (torch.float64, 64, 1 << 16),
    ],
    ids=["float32-2", "float32-16", "float64-4", "int64-8", "float32-256", "float64-64"],
)
def test_cuda_moving_hub_rows(dtype: torch.dtype, F: int, E: int, cuda_device: str) -> None:
    torch.manual_seed(29)
    N = 50_000
    index = torch.randint(0, N, (E,))
    hub = torch.arange(E) // 4096 % 7 * 13
    on_hub = torch.rand(E) < 0.5
    index[on_hub] = hub[on_hub]
    index = index.to(cuda_device)
    src = torch.randint(-3, 4, (2, E, F)).to(dtype).to(cuda_device)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    want = torch.zeros(2, N, F, dtype=wide, device=cuda_device).index_add_(1, index, src.to(wide))
    out = torchplug.scatter_sum(src, index, 1, dim_size=N)
    torch.testing.assert_close(out, want.to(dtype), rtol=0, atol=0)


# A sorted index but for one pair of neighbours, or for a value before the
# first row, with narrow rows in the CSR (rows of 6 and 12 float32 values, three
# column vectors and no hot row, keep the limit of 2^17 entries): the CUDA
# probe that finds most unsorted indices
# at once samples pairs, so where it misses, the counting pass must still flag
# the index unsorted (and the atomic rows sum it; the sorted segments would
# read every row's sources one position off).
@pytest.mark.parametrize("flaw", ["swap-first", "swap-middle", "swap-last", "out-of-range-first"])
@pytest.mark.parametrize("F", [6, 12])
def test_cuda_sorted_index_with_one_flaw(flaw: str, F: int, cuda_device: str) -> None:
    torch.manual_seed(28)
    E = ATOMIC_LIMIT // 4 + 1
    N = E // 3 + 1
    index = torch.arange(E) // 3
    if flaw == "out-of-range-first":
        index[0] = -1
    else:  # swap a row's last entry with the next row's first
        p = {"swap-first": 2, "swap-middle": E // 2 // 3 * 3 + 2, "swap-last": (E - 2) // 3 * 3 - 1}[flaw]
        assert index[p] < index[p + 1]
        index[p], index[p + 1] = index[p + 1].clone(), index[p].clone()
    index = index.to(cuda_device)
    src = torch.randint(-3, 4, (E, F), dtype=torch.float32, device=cuda_device)
    keep = (index >= 0) & (index < N)
    want = torch.zeros(N, F, dtype=torch.float64, device=cuda_device)
    want.index_add_(0, index[keep], src[keep].double())
    out = torchplug.scatter_sum(src, index, 0, dim_size=N)
    torch.testing.assert_close(out, want.float(), rtol=0, atol=0)


@pytest.mark.parametrize("value", ["2M", "-1", "99999999999999999999"])
def test_cuda_atomic_limit_rejects_garbage(value: str, cuda_device: str) -> None:
    result = _probe(64, value)
    assert result.returncode != 0
    assert f"TORCHPLUG_SCATTER_ATOMIC_LIMIT must be a non-negative integer, got '{value}'" in result.stderr


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("F", [16, 1])
@pytest.mark.parametrize("offset", [1, 2, 4])
def test_out_at_an_offset(offset: int, F: int, dtype: torch.dtype, device: str) -> None:
    """A contiguous out= starting 1, 2 or 4 elements into its storage: CUDA adds
    rows of 16 float32 into it with 16-byte atomics only when it is aligned, and
    converts a float16 or bfloat16 out to and from its float accumulator in
    vectors only as wide as its alignment allows (rows of 16 take the atomic
    rows, rows of 1 the warp runs)."""
    torch.manual_seed(26)
    N = 50 * 16 // F
    src = make_src((3000, F), dtype, device)
    index = make_index(3000, N, device)
    out = make_src((N * F + offset,), dtype, device)[offset:].view(N, F)
    before = out.clone()
    torchplug.scatter_sum(src, index, 0, out=out)
    assert_scatter_close(out, src, index, 0, out=before)


@pytest.mark.parametrize(
    "out_shape",
    [(4, 2), (4, 3, 1), (4,), (5, 3, 2)],
    ids=str,
)
def test_rejects_out_shape(out_shape: tuple, device: str) -> None:
    src, index = _args(device)
    out = torch.zeros(out_shape, device=device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'out'"):
        torchplug.scatter_sum(src, index, 0, out=out)


@pytest.mark.parametrize("bad", [torch.float64, torch.float16, torch.int64], ids=str)
def test_rejects_out_dtype(bad: torch.dtype, device: str) -> None:
    src, index = _args(device)
    out = torch.zeros((4, 3), dtype=bad, device=device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'out'"):
        torchplug.scatter_sum(src, index, 0, out=out)


@pytest.mark.parametrize("dim", [2, -3, 10])
def test_rejects_dim_out_of_range(dim: int, device: str) -> None:
    src, index = _args(device)
    with pytest.raises(IndexError, match=f"{OP}.*'dim'"):
        torchplug.scatter_sum(src, index, dim)
    with pytest.raises(IndexError, match=f"{OP}.*'dim'"):
        torch.ops.torchplug.scatter_sum_(torch.zeros(4, 3, device=device), src, index, dim)


def test_rejects_zero_dim_src(device: str) -> None:
    src = torch.tensor(1.5, device=device)
    index = torch.tensor(0, device=device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'src'"):
        torchplug.scatter_sum(src, index, 0)
    with pytest.raises(RuntimeError, match=f"{OP}.*'src'"):
        torchplug.scatter_sum(src, index.view(1), 0, dim_size=1)


def test_rejects_negative_dim_size(device: str) -> None:
    src, index = _args(device)
    with pytest.raises(RuntimeError, match=f"{OP}.*'dim_size'"):
        torchplug.scatter_sum(src[:0], index[:0], 0, dim_size=-1)


def test_rejects_mixed_devices(cuda_device: str) -> None:
    src, index = _args("cpu")
    with pytest.raises(RuntimeError, match=f"{OP}.*'src'.*'index'"):
        torchplug.scatter_sum(src.to(cuda_device), index, 0)
    with pytest.raises(RuntimeError, match=f"{OP}.*'src'.*'index'"):
        torchplug.scatter_sum(src, index.to(cuda_device), 0)
    out = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match=f"{OP}.*'out'"):
        torchplug.scatter_sum(src.to(cuda_device), index.to(cuda_device), 0, out=out)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_gpu() -> None:
    torch.manual_seed(21)
    src = make_src((5000, 8), torch.float32, "cuda:1")
    index = make_index(5000, 100, "cuda:1")
    out = torchplug.scatter_sum(src, index, 0, dim_size=100)
    assert out.device == src.device
    assert_scatter_close(out, src, index, 0, dim_size=100)


# --------------------------------------------------------------------------- deterministic mode

def forward_backward(row: OpRow, sample: Sample, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The row's outputs on `sample` (values, and the arg of min and max),
    then the gradient of its src for `grad` of the values."""
    leaf = sample.inputs[0].detach().clone().requires_grad_()
    outputs = row.call_with((leaf,), sample)
    (g_src,) = torch.autograd.grad(outputs[0], (leaf,), grad)
    return tuple(t.detach() for t in outputs) + (g_src,)


def assert_src_grad_close(got: torch.Tensor, want: torch.Tensor, terms: torch.Tensor, context: str) -> None:
    """A float32 src gradient against its float64 reference: within
    gamma(terms + 1, 2**-24) * |want|, with `terms` (per source) the count of
    its slot: sum's and min/max's gradients copy grad (exact), mean's divides
    it once, mul's multiplies the slot's other terms-1 factors by it."""
    assert got.dtype == torch.float32 and got.shape == want.shape, context
    got, want = got.double().cpu(), want.double().cpu()
    tol = gamma(terms.double().cpu() + 1, 2.0**-24) * want.abs()
    err = (got - want).abs()
    bad = ~(err <= tol)
    assert not bad.any(), (f"{context}: {int(bad.sum())} of {bad.numel()} gradient elements off; worst error "
                           f"{float(err.max())}")


def assert_deterministic_runs(row: OpRow, sample: Sample, grad: torch.Tensor, index: torch.Tensor,
                              context: str) -> None:
    """Two deterministic-mode calls of the row on `sample` (forward, and the
    src gradient for `grad`) give the same bits, and the first matches the
    reference; `index` (CPU) names each source's slot, for the gradient's bound."""
    with deterministic_algorithms():
        runs = [forward_backward(row, sample, grad) for _ in range(2)]
    for first, second in zip(*runs):
        assert_bitwise(second, first, f"{context}: runs differ")
    row.check(runs[0][:-1], sample, "deterministic mode")
    terms = torch.bincount(index, minlength=DET_N)[index].view(-1, 1).expand(-1, grad.size(1))
    assert_src_grad_close(runs[0][-1], row.grad_reference(sample, grad)[0], terms, context)


@pytest.mark.parametrize("kind", ["random", "power-law"])
@pytest.mark.parametrize("row", scatter_rows_param())
def test_deterministic_mode_every_reduction_at_width_16(row: OpRow, kind: str, device: str) -> None:
    """Under torch.use_deterministic_algorithms(True) two calls on the same
    inputs give the same bits: values, the arg of min and max, and src's
    gradient, over a random index and a power-law one with a hub of
    thousands. Rows of 16 float32 values, the width between the 1 and 64
    of test_scatter_reduce.py's CUDA test (and of test_cuda_reliability.py's);
    the first run also against the float64 reference (scatter_reference)."""
    F = 16
    g = torch.Generator().manual_seed(41)
    src = values((DET_E, F), torch.float32, row.reduce, g, zeros=False).to(device)
    index = det_index(kind, DET_E, DET_N, g)
    grad = torch.randn(DET_N, F, generator=g).to(device)
    sample = Sample((src, index.to(device)), 0, DET_N, desc=kind)
    assert_deterministic_runs(row, sample, grad, index, f"{row.name} {kind} F={F}")



def _one_value_index(layout: str, g: torch.Generator) -> tuple[torch.Tensor, int]:
    """(CPU index, rows) of DET_E sources for test_deterministic_mode_one_value_per_source."""
    if layout == "sorted":
        return torch.sort(torch.randint(0, DET_N, (DET_E,), generator=g)).values, DET_N
    if layout == "sorted-with-strays":
        index = torch.sort(torch.randint(0, DET_N, (DET_E,), generator=g)).values
        stray = torch.arange(0, DET_E, 97)
        index[stray] = torch.where(stray % 2 == 0, -1, DET_N)
        return index, DET_N
    if layout == "power-law":  # a hub of about 3.7K sources: hub blocks at one value per source
        return det_index("power-law", DET_E, DET_N, g), DET_N
    rows = 1_000_000  # "40-of-a-million": long runs of empty rows between the taken ones
    taken = torch.randperm(rows, generator=g)[:40]
    return taken[torch.randint(0, 40, (DET_E,), generator=g)], rows


@pytest.mark.parametrize("layout", ["sorted", "sorted-with-strays", "power-law", "40-of-a-million"])
@pytest.mark.parametrize("row", rows_param([r for r in SCATTER_ROWS if r.reduce in ("sum", "mean", "mul")]))
def test_deterministic_mode_one_value_per_source(row: OpRow, layout: str, cuda_device: str) -> None:
    """One value per source in deterministic mode (CUDA sorts the values
    themselves, or reduces a sorted index in place): two runs give the same
    bits, alone and into out=, over indexes that are sorted, sorted but for
    values outside [0, N) (left out), hub-sized, or spread over a few of a
    million rows; and an index of src's shape [E, 3], reduced per flat slot.
    The first run against the reference of the sources that are kept."""
    g = torch.Generator().manual_seed(43)
    index, n = _one_value_index(layout, g)
    src = values((DET_E,), torch.float32, row.reduce, g, zeros=False)
    base = values((n,), torch.float32, row.reduce, g).to(cuda_device)
    kept = (index >= 0) & (index < n)
    want = Sample((src[kept].to(cuda_device), index[kept].to(cuda_device)), 0, n, base)
    src, index = src.to(cuda_device), index.to(cuda_device)
    with deterministic_algorithms():
        runs = []
        for _ in range(2):
            out = base.clone()
            runs.append(row.call(Sample((src, index), 0, n)) + row.call(Sample((src, index), 0, None, base), out=out))
    for first, second in zip(*runs):
        assert_bitwise(second, first, f"{row.name} {layout}: runs differ")
    row.check(runs[0][:1], Sample(want.inputs, 0, n), f"{row.name} {layout}")
    row.check(runs[0][1:], want, f"{row.name} {layout} into out=")

    wide = values((DET_E, 3), torch.float32, row.reduce, g, zeros=False).to(cuda_device)
    wide_index = torch.randint(0, DET_N, (DET_E, 3), generator=g).to(cuda_device)
    with deterministic_algorithms():
        flat = [row.call(Sample((wide, wide_index), 0, DET_N)) for _ in range(2)]
    assert_bitwise(flat[1][0], flat[0][0], f"{row.name}: an index of src's shape, runs differ")
    row.check(flat[0], Sample((wide, wide_index), 0, DET_N), f"{row.name}: an index of src's shape")
