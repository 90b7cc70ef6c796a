"""NaN, infinities, signed zeros and empty inputs.

Special values: torchplug.add and torchplug.scatter_sum must propagate NaN and
+-inf exactly as plain PyTorch does on the same inputs (``a + b``,
``index_add_``, ``scatter_add_``), including ``inf + -inf = nan`` in one output
slot. The finite values are small integers, so every sum is exact in every
dtype and every summation order: results are compared with
``assert_close(rtol=0, atol=0, equal_nan=True)``, plus the sign of zero.

Empty inputs: zero-size dimensions on every path (E = 0, F = 0, outer = 0,
N = 0 with dim_size=0, out= of zero size, an empty index with dim_size None),
for both ops, through the functional API, the schema-level ops, out= and
autograd.
"""

from __future__ import annotations

from typing import Optional

import pytest
import torch

import torchplug
from op_table import OpRow, Sample, rows_param
from scatter_rows import SEGMENT_ROWS, scatter_rows_param
from scatter_reference import broadcast_index, default_dim_size

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NAN, INF = float("nan"), float("inf")
OP = "torchplug::scatter_sum"


def assert_same_values(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same shape, dtype, device; equal values with NaN where expected has NaN;
    for floats also the same sign bit wherever expected is not NaN."""
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    assert actual.device == expected.device
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    if expected.dtype.is_floating_point:
        keep = ~torch.isnan(expected)
        assert torch.equal(torch.signbit(actual)[keep], torch.signbit(expected)[keep]), (
            f"sign of zero differs:\nactual   {actual}\nexpected {expected}"
        )


# =========================================================================== add


def special_vector(dtype: torch.dtype, device: str) -> torch.Tensor:
    """Every kind of float value: NaN, +-inf, +-0, small integers, the largest
    finite values (their sum overflows to inf) and the smallest subnormal."""
    info = torch.finfo(dtype)
    tiny_sub = info.tiny * info.eps  # the smallest positive subnormal
    values = [NAN, INF, -INF, 0.0, -0.0, 1.0, -2.0, info.max, -info.max, tiny_sub, -tiny_sub]
    return torch.tensor(values, dtype=torch.float64).to(dtype).to(device)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_add_special_values_every_pair(dtype: torch.dtype, device: str) -> None:
    """Outer sum of the special values with themselves: nan + x, inf + -inf,
    inf + inf, max + max (overflow), -0 + -0, -0 + +0, subnormals."""
    v = special_vector(dtype, device)
    a, b = v.view(-1, 1), v.view(1, -1)
    got = torchplug.add(a, b)
    assert_same_values(got, a + b)
    # Spelled out, so the reference cannot be wrong in the same way.
    i = {"nan": 0, "inf": 1, "-inf": 2, "0": 3, "-0": 4, "1": 5, "max": 7}
    assert torch.isnan(got[i["inf"], i["-inf"]]) and torch.isnan(got[i["-inf"], i["inf"]])
    assert torch.isnan(got[i["nan"]]).all() and torch.isnan(got[:, i["nan"]]).all()
    assert got[i["inf"], i["inf"]] == INF and got[i["-inf"], i["-inf"]] == -INF
    assert got[i["max"], i["max"]] == INF
    assert got[i["-0"], i["-0"]] == 0 and torch.signbit(got[i["-0"], i["-0"]])
    assert got[i["0"], i["-0"]] == 0 and not torch.signbit(got[i["0"], i["-0"]])
    assert got[i["inf"], i["1"]] == INF


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("layout", ["transposed", "strided", "expanded"])
def test_add_special_values_strided(dtype: torch.dtype, layout: str, device: str) -> None:
    """The same through non-contiguous operands (the strided kernels)."""
    v = special_vector(dtype, device)
    n = v.numel()
    grid_a = v.view(-1, 1).expand(n, n)
    grid_b = v.view(1, -1).expand(n, n)
    if layout == "transposed":
        a, b = grid_a.contiguous().t(), grid_b.contiguous()
    elif layout == "strided":
        a = torch.stack([grid_a, grid_a], dim=-1)[..., 1]
        b = torch.stack([grid_b, grid_b], dim=0)[1].t().contiguous().t()
    else:
        a, b = grid_a, grid_b
    assert_same_values(torchplug.add(a, b), a + b)


@pytest.mark.parametrize(
    "dtype_a, dtype_b",
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float16),
        (torch.float32, torch.float64),
        (torch.int32, torch.float16),
        (torch.uint8, torch.bfloat16),
        (torch.int64, torch.float32),
    ],
    ids=str,
)
def test_add_special_values_promotion(dtype_a: torch.dtype, dtype_b: torch.dtype, device: str) -> None:
    """Specials survive type promotion (and a wider float's max becomes inf in a
    narrower result where PyTorch's does)."""
    if dtype_a.is_floating_point:
        a = special_vector(dtype_a, device).view(-1, 1)
    else:
        a = torch.tensor([0, 1, 2, 100], dtype=dtype_a, device=device).view(-1, 1)
    b = special_vector(dtype_b, device).view(1, -1)
    for x, y in ((a, b), (b, a)):
        out = torchplug.add(x, y)
        assert out.dtype == torch.result_type(x, y)
        assert_same_values(out, x + y)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("value", [NAN, INF, -INF, -0.0])
def test_add_special_zero_dim(dtype: torch.dtype, value: float, device: str) -> None:
    """A 0-d special value broadcast over a tensor, on either side."""
    t = special_vector(dtype, device)
    s = torch.tensor(value, dtype=dtype, device=device)
    assert_same_values(torchplug.add(t, s), t + s)
    assert_same_values(torchplug.add(s, t), s + t)
    assert_same_values(torchplug.add(s, s), s + s)


# =========================================================================== scatter_sum special values

# Sources along dim (E = 8) and the slot each one lands in:
#   e=0 nan            -> slot 1            => nan
#   e=1 +inf, e=2 -inf -> slot 0            => inf + -inf = nan
#   e=3 +inf           -> slot 3 alone      => +inf
#   e=4 -inf, e=5 3.0  -> slot 4            => -inf
#   e=6 2.0, e=7 -5.0  -> slot 2            => -3.0 (finite, exact)
#   slot 5: nothing                         => 0 (dim_size 6)
SPECIAL_SRC = [NAN, INF, -INF, INF, -INF, 3.0, 2.0, -5.0]
SPECIAL_INDEX = [1, 0, 0, 3, 4, 4, 2, 2]
SPECIAL_EXPECTED = [NAN, NAN, -3.0, INF, -INF, 0.0]
SPECIAL_N = 6

# (src shape with E at position dim, dim): the kernels' layouts.
SPECIAL_LAYOUTS = [
    pytest.param((8,), 0, id="flat"),  # inner == 1, outer == 1
    pytest.param((8, 3), 0, id="rows"),  # 1-D index, inner > 1
    pytest.param((2, 8, 4), 1, id="middle"),  # outer > 1, inner > 1
    pytest.param((3, 8), -1, id="last"),  # inner == 1, outer > 1
    pytest.param((8, 1), 0, id="rows-inner1"),
]


def special_src(shape: tuple[int, ...], dim: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """src of `shape` whose every slice e along dim holds SPECIAL_SRC[e]
    (shifted by a small integer per column: still exact, not all columns equal)."""
    d = dim % len(shape)
    values = torch.tensor(SPECIAL_SRC, dtype=torch.float64)
    view = [1] * len(shape)
    view[d] = len(SPECIAL_SRC)
    src = values.view(view).expand(shape).clone()
    column = torch.arange(src.numel(), dtype=torch.float64).view(shape) % 3  # 0, 1, 2
    return (src + column).to(dtype).to(device)


def index_add_reference(src: torch.Tensor, index: torch.Tensor, dim: int, n: int,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Plain PyTorch in src's own dtype: index_add_ for a 1-D index,
    scatter_add_ for an index of src's shape."""
    d = dim % src.dim()
    if out is None:
        shape = list(src.shape)
        shape[d] = n
        base = torch.zeros(shape, dtype=src.dtype, device=src.device)
    else:
        base = out.clone()
    if index.dim() == 1:
        return base.index_add_(d, index, src)
    return base.scatter_add_(d, index, src)


def full_index(index: torch.Tensor, src: torch.Tensor, dim: int) -> torch.Tensor:
    """The 1-D index laid along dim and materialised to src's shape (so the
    kernels take their full-index path)."""
    return broadcast_index(index, src, dim).contiguous()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape, dim", SPECIAL_LAYOUTS)
@pytest.mark.parametrize("index_kind", ["1d", "full"])
@pytest.mark.parametrize("order", ["given", "sorted"])
def test_scatter_special_values(
    dtype: torch.dtype, shape: tuple, dim: int, index_kind: str, order: str, device: str
) -> None:
    """Sorting the terms (CUDA: the no-permutation path) only reorders each
    slot's terms, so the same slots hold the same specials."""
    src = special_src(shape, dim, dtype, device)
    index = torch.tensor(SPECIAL_INDEX, device=device)
    if order == "sorted":
        index, permutation = index.sort(stable=True)
        src = src.index_select(dim % src.dim(), permutation)
    if index_kind == "full":
        index = full_index(index, src, dim)
    got = torchplug.scatter_sum(src, index, dim, dim_size=SPECIAL_N)
    assert_same_values(got, index_add_reference(src, index, dim, SPECIAL_N))
    # Spelled out: the column shifts leave non-finite slots as they are.
    d = dim % src.dim()
    for slot, want in enumerate(SPECIAL_EXPECTED):
        row = got.select(d, slot)
        if want != want:  # NaN
            assert torch.isnan(row).all(), (slot, row)
        elif abs(want) == INF:
            assert (row == want).all(), (slot, row)
    # Default dim_size: max + 1 = 5.
    got = torchplug.scatter_sum(src, index, dim)
    assert_same_values(got, index_add_reference(src, index, dim, SPECIAL_N - 1))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape, dim", SPECIAL_LAYOUTS)
@pytest.mark.parametrize("index_kind", ["1d", "full"])
def test_scatter_special_values_out(
    dtype: torch.dtype, shape: tuple, dim: int, index_kind: str, device: str
) -> None:
    """out= holding specials: nan stays nan; -inf in out plus +inf from src is
    nan; inf in an untouched slot stays inf; -0.0 in an untouched slot stays
    -0.0 (nothing is added to it)."""
    src = special_src(shape, dim, dtype, device)
    index = torch.tensor(SPECIAL_INDEX, device=device)
    if index_kind == "full":
        index = full_index(index, src, dim)
    d = dim % src.dim()
    out_shape = list(shape)
    out_shape[d] = SPECIAL_N + 2
    out = torch.ones(out_shape, dtype=torch.float64)
    for slot, value in {2: NAN, 3: -INF, 4: 1.0, 5: INF, 6: -0.0, 7: -INF}.items():
        out.select(d, slot).fill_(value)
    out = out.to(dtype).to(device)
    expected = index_add_reference(src, index, dim, SPECIAL_N + 2, out=out)
    result = torchplug.scatter_sum(src, index, dim, out=out)
    assert result is out
    assert_same_values(out, expected)
    assert torch.isnan(out.select(d, 3)).all()  # -inf (out) + inf (src)
    assert (out.select(d, 5) == INF).all() and (out.select(d, 7) == -INF).all()
    assert torch.signbit(out.select(d, 6)).all()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("index_kind", ["1d", "full"])
@pytest.mark.parametrize("shape, dim", [pytest.param((6,), 0, id="flat"), pytest.param((6, 4), 0, id="rows")])
def test_scatter_negative_zero(dtype: torch.dtype, index_kind: str, shape: tuple, dim: int, device: str) -> None:
    """A slot that receives only -0.0 holds +0.0, as index_add_ into zeros
    gives (the sum starts at +0); out= holding -0.0 plus -0.0 stays -0.0."""
    src = torch.full(shape, -0.0, dtype=dtype, device=device)
    index = torch.tensor([0, 0, 1, 2, 2, 2], device=device)
    if index_kind == "full":
        index = full_index(index, src, dim)
    got = torchplug.scatter_sum(src, index, dim, dim_size=4)
    assert_same_values(got, index_add_reference(src, index, dim, 4))
    assert not torch.signbit(got).any()
    out = torch.full((4,) + shape[1:], -0.0, dtype=dtype, device=device)
    # The reference runs on the CPU: CUDA's float16/bfloat16 index_add_ (seen on
    # the H200, torch 2.11) turns -0.0 + -0.0 into +0.0, against IEEE 754.
    expected = index_add_reference(src.cpu(), index.cpu(), dim, 4, out=out.cpu())
    torchplug.scatter_sum(src, index, dim, out=out)
    assert_same_values(out.cpu(), expected)
    assert torch.signbit(out).all()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_scatter_overflow_and_large_values(dtype: torch.dtype, device: str) -> None:
    """max + max overflows to inf and max + -max is 0 in every dtype, as in
    plain PyTorch (half types: the float32 accumulator overflows to the same
    result the dtype does)."""
    big = torch.finfo(dtype).max
    src = torch.tensor([big, big, big, -big, -big, -big], dtype=dtype, device=device)
    index = torch.tensor([0, 0, 1, 1, 2, 2], device=device)
    got = torchplug.scatter_sum(src, index, 0, dim_size=3)
    assert_same_values(got, index_add_reference(src, index, 0, 3))
    assert got[0] == INF and got[1] == 0 and got[2] == -INF


def test_scatter_special_values_grad(device: str) -> None:
    """Backward of a scatter with non-finite forward values: the gradient of src
    is grad_out gathered, NaN/inf in grad_out travel to exactly the sources of
    that slot."""
    src = special_src((8, 3), 0, torch.float64, device).requires_grad_()
    index = torch.tensor(SPECIAL_INDEX, device=device)
    out = torchplug.scatter_sum(src, index, 0, dim_size=SPECIAL_N)
    grad_out = torch.arange(SPECIAL_N * 3, dtype=torch.float64, device=device).view(SPECIAL_N, 3)
    grad_out[2, 1] = NAN
    grad_out[4, 0] = INF
    (g,) = torch.autograd.grad(out, (src,), grad_out)
    ref_src = src.detach().clone().requires_grad_()
    ref = torch.zeros(SPECIAL_N, 3, dtype=torch.float64, device=device).index_add(0, index, ref_src)
    (want,) = torch.autograd.grad(ref, (ref_src,), grad_out)
    assert_same_values(g, want)


# =========================================================================== empty inputs: add

ADD_EMPTY = [
    pytest.param((0,), (0,), id="0+0"),
    pytest.param((0,), (), id="0+scalar"),
    pytest.param((0,), (1,), id="0+1"),
    pytest.param((3, 0), (1,), id="3x0+1"),
    pytest.param((3, 0), (3, 1), id="3x0+3x1"),
    pytest.param((0, 4), (4,), id="0x4+4"),
    pytest.param((1, 0), (5, 1), id="1x0+5x1"),
    pytest.param((2, 0, 3), (2, 1, 3), id="2x0x3+2x1x3"),
    pytest.param((0, 1, 2), (1, 3, 1), id="0x1x2+1x3x1"),
]


@pytest.mark.parametrize(
    "dtype_a, dtype_b",
    [(torch.float32, torch.float32), (torch.float16, torch.float16), (torch.int64, torch.int64),
     (torch.uint8, torch.int8), (torch.int32, torch.float64), (torch.bfloat16, torch.float16)],
    ids=str,
)
@pytest.mark.parametrize("shape_a, shape_b", ADD_EMPTY)
def test_add_empty(shape_a: tuple, shape_b: tuple, dtype_a: torch.dtype, dtype_b: torch.dtype,
                   device: str) -> None:
    a = torch.ones(shape_a, dtype=dtype_a, device=device)
    b = torch.ones(shape_b, dtype=dtype_b, device=device)
    for x, y in ((a, b), (b, a)):
        expected = x + y
        assert expected.numel() == 0
        assert_same_values(torchplug.add(x, y), expected)
        assert_same_values(torch.ops.torchplug.add(x, y), expected)


@pytest.mark.parametrize("shape_a, shape_b", ADD_EMPTY)
def test_add_empty_grad(shape_a: tuple, shape_b: tuple, device: str) -> None:
    a = torch.ones(shape_a, dtype=torch.float64, device=device).requires_grad_()
    b = torch.ones(shape_b, dtype=torch.float64, device=device).requires_grad_()
    out = torchplug.add(a, b)
    ga, gb = torch.autograd.grad(out, (a, b), torch.ones_like(out))
    want_a, want_b = torch.autograd.grad(a + b, (a, b), torch.ones_like(out))
    assert_same_values(ga, want_a)
    assert_same_values(gb, want_b)


def test_add_empty_meta() -> None:
    out = torchplug.add(torch.empty((3, 0), device="meta"), torch.empty((1,), dtype=torch.float16, device="meta"))
    assert out.shape == (3, 0) and out.dtype == torch.float32 and out.device.type == "meta"


# =========================================================================== empty inputs: scatter_sum

SCATTER_EMPTY_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64]


def docs_output(src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: Optional[int],
                out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The expected result per docs/ops.md, in plain PyTorch: index broadcast
    torch_scatter's way (a 1-D index laid along dim, trailing dims added,
    size-1 dims expanded); dim_size defaults to max(index) + 1 over the index
    broadcast to src, 0 when src or the index is empty."""
    d = dim % src.dim()
    full = broadcast_index(index, src, d)
    if out is not None:
        base = out.clone()
    else:
        n = dim_size if dim_size is not None else default_dim_size(index, src, d)
        shape = list(src.shape)
        shape[d] = n
        base = torch.zeros(shape, dtype=src.dtype, device=src.device)
    if src.numel() > 0:
        base.scatter_add_(d, full, src)
    return base


def check_every_path(src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: Optional[int]) -> None:
    """functional, schema-level op, scatter(reduce="sum"), out= (a fresh
    non-zero out of the expected shape, which must come back unchanged plus the
    sums), and autograd (gradient of src has src's shape)."""
    expected = docs_output(src, index, dim, dim_size)
    assert_same_values(torchplug.scatter_sum(src, index, dim, dim_size=dim_size), expected)
    assert_same_values(torch.ops.torchplug.scatter_sum(src, index, dim, dim_size), expected)
    assert_same_values(torchplug.scatter(src, index, dim, dim_size=dim_size, reduce="sum"), expected)
    # out=: filled with 7s, accumulates the (possibly empty) sums in place.
    out = torch.full(expected.shape, 7, dtype=src.dtype, device=src.device)
    want = docs_output(src, index, dim, None, out=out)
    assert torchplug.scatter_sum(src, index, dim, out=out) is out
    assert_same_values(out, want)
    out2 = torch.full(expected.shape, 7, dtype=src.dtype, device=src.device)
    assert torch.ops.torchplug.scatter_sum_(out2, src, index, dim) is None
    assert_same_values(out2, want)
    if src.dtype.is_floating_point:
        leaf = src.detach().clone().requires_grad_()
        result = torchplug.scatter_sum(leaf, index, dim, dim_size=dim_size)
        (g,) = torch.autograd.grad(result, (leaf,), torch.ones_like(result), allow_unused=True)
        assert g is not None and g.shape == src.shape
        assert (g == 1).all()


# (src shape, dim, index kind, dim_size). Index kinds: "1d" an [E] vector with
# values < 4; "full" that vector materialised to src's shape (for a zero-size
# src a zero-size view over the E values); "fresh" a new zero-filled index of
# src's shape (zero-size: no storage at all).
EMPTY_CASES = [
    # E = 0
    pytest.param((0, 3), 0, "1d", 5, id="E0-dimsize5"),
    pytest.param((0, 3), 0, "1d", None, id="E0-default"),  # empty index -> size 0
    pytest.param((0, 3), 0, "full", None, id="E0-full-default"),
    pytest.param((0, 3), 0, "full", 4, id="E0-full-dimsize4"),
    pytest.param((0,), 0, "1d", None, id="E0-1d-src"),
    pytest.param((0,), 0, "1d", 3, id="E0-1d-src-dimsize3"),
    pytest.param((2, 0, 3), 1, "1d", 4, id="E0-middle"),
    pytest.param((2, 0, 3), -2, "1d", None, id="E0-middle-neg-default"),
    # F = 0 (inner size 0): sources exist, nothing per source
    pytest.param((5, 0), 0, "1d", None, id="F0-default"),  # src empty -> 0
    pytest.param((5, 0), 0, "1d", 7, id="F0-dimsize7"),
    pytest.param((5, 0), 0, "full", None, id="F0-full-default"),  # src and index empty -> 0
    pytest.param((5, 0), 0, "full", 7, id="F0-full-dimsize7"),
    pytest.param((5, 2, 0), 0, "1d", None, id="F0-3d"),
    pytest.param((1, 0), 0, "full", None, id="F0-full-E1"),
    pytest.param((5, 0), 0, "fresh", None, id="F0-fresh-default"),
    pytest.param((5, 0), 0, "fresh", 7, id="F0-fresh-dimsize7"),
    # outer = 0
    pytest.param((0, 5, 3), 1, "1d", None, id="outer0-default"),
    pytest.param((0, 5, 3), 1, "1d", 6, id="outer0-dimsize6"),
    pytest.param((0, 5, 3), 1, "full", None, id="outer0-full-default"),
    pytest.param((0, 5), -1, "1d", 4, id="outer0-last"),
    pytest.param((0, 5, 3), 1, "fresh", 6, id="outer0-fresh-dimsize6"),
    pytest.param((0, 5, 1), 1, "fresh", 6, id="outer0-fresh-inner1"),
    # N = 0 (dim_size=0) with E = 0
    pytest.param((0, 3), 0, "1d", 0, id="N0"),
    pytest.param((0, 3), 0, "full", 0, id="N0-full"),
    pytest.param((4, 0, 3), 1, "1d", 0, id="N0-middle"),
]


def empty_case_index(shape: tuple, dim: int, kind: str, device: str) -> torch.Tensor:
    """See EMPTY_CASES."""
    d = dim % len(shape)
    if kind == "fresh":
        return torch.zeros(shape, dtype=torch.long, device=device)
    values = torch.arange(shape[d], device=device) % 4
    if kind == "1d":
        return values
    view = [1] * len(shape)
    view[d] = -1
    return values.view(view).expand(shape).contiguous()


@pytest.mark.parametrize("dtype", SCATTER_EMPTY_DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim, kind, dim_size", EMPTY_CASES)
def test_scatter_empty(shape: tuple, dim: int, kind: str, dim_size: Optional[int], dtype: torch.dtype,
                       device: str) -> None:
    src = torch.ones(shape, dtype=dtype, device=device)
    index = empty_case_index(shape, dim, kind, device)
    check_every_path(src, index, dim, dim_size)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
@pytest.mark.parametrize(
    "src_shape, index_shape",
    [
        pytest.param((3, 0, 2), (3, 1, 2), id="3x0x2-index-3x1x2"),
        pytest.param((3, 0, 2), (3, 1, 1), id="3x0x2-index-3x1x1"),
        pytest.param((3, 0), (3, 1), id="3x0-index-3x1"),
        pytest.param((3, 2, 0), (3, 2), id="3x2x0-index-3x2"),
    ],
)
def test_scatter_broadcast_index_over_empty_src(src_shape: tuple, index_shape: tuple, dtype: torch.dtype,
                                                device: str) -> None:
    """An index with size-1 (or missing trailing) dims over a src with a
    zero-size dim: the index itself is not empty, but broadcast to src it is,
    so the default dim_size is 0 (the rule: max(index) + 1 over the index
    broadcast to src; 0 when src or the index is empty)."""
    src = torch.ones(src_shape, dtype=dtype, device=device)
    index = torch.arange(torch.Size(index_shape).numel(), device=device).view(index_shape) % 5
    check_every_path(src, index, 0, None)
    check_every_path(src, index, 0, 9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_scatter_out_of_zero_size(dtype: torch.dtype, device: str) -> None:
    """out= with a zero-size dimension: nothing to write, returned as is."""
    # N = 0 along dim, nothing to scatter.
    out = torch.empty((0, 3), dtype=dtype, device=device)
    src = torch.ones((0, 3), dtype=dtype, device=device)
    index = torch.empty(0, dtype=torch.long, device=device)
    assert torchplug.scatter_sum(src, index, 0, out=out) is out
    assert out.shape == (0, 3)
    assert torchplug.scatter_sum(src, index, 0, out=out, dim_size=0) is out
    # F = 0: sources with valid slots, out of shape [N, 0].
    out = torch.empty((4, 0), dtype=dtype, device=device)
    src = torch.ones((6, 0), dtype=dtype, device=device)
    index = torch.tensor([0, 3, 3, 1, 2, 0], device=device)
    assert torchplug.scatter_sum(src, index, 0, out=out) is out
    assert out.shape == (4, 0)
    # outer = 0.
    out = torch.empty((0, 4, 2), dtype=dtype, device=device)
    src = torch.ones((0, 6, 2), dtype=dtype, device=device)
    assert torchplug.scatter_sum(src, index, 1, out=out) is out
    assert out.shape == (0, 4, 2)
    # Non-contiguous zero-size out.
    base = torch.empty((3, 0), dtype=dtype, device=device)
    out = base.t()  # [0, 3]
    src = torch.ones((0, 3), dtype=dtype, device=device)
    assert torchplug.scatter_sum(src, torch.empty(0, dtype=torch.long, device=device), 0, out=out) is out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_scatter_empty_src_leaves_out_unchanged(dtype: torch.dtype, device: str) -> None:
    """E = 0 into a non-empty (and non-contiguous) out: bit for bit unchanged,
    NaN and -0.0 included."""
    base = torch.tensor([[1.5, NAN, -0.0], [INF, -2.0, 0.0]], dtype=torch.float64)
    if not dtype.is_floating_point:
        base = torch.tensor([[1, -7, 0], [3, 2, 9]])
    base = base.to(dtype).to(device)
    out = base.t()  # [3, 2], dim 0 has N = 3
    before = out.clone()
    src = torch.ones((0, 2), dtype=dtype, device=device)
    index = torch.empty(0, dtype=torch.long, device=device)
    assert torchplug.scatter_sum(src, index, 0, out=out) is out
    assert_same_values(out, before)


def test_scatter_n0_with_sources(device: str) -> None:
    """dim_size=0 while there are sources: every index value is out of range.
    CPU raises IndexError (so does CUDA in checked mode); CUDA otherwise skips
    them all and returns the empty output."""
    src = torch.ones((4, 3), device=device)
    index = torch.tensor([0, 1, 0, 2], device=device)
    if torchplug.validates_indices(device):
        with pytest.raises(IndexError, match=f"{OP}.*'index'"):
            torchplug.scatter_sum(src, index, 0, dim_size=0)
        with pytest.raises(IndexError, match=f"{OP}.*'index'"):
            torchplug.scatter_sum(src, index, 0, out=torch.empty((0, 3), device=device))
        return
    got = torchplug.scatter_sum(src, index, 0, dim_size=0)
    assert got.shape == (0, 3)
    out = torch.empty((0, 3), device=device)
    assert torchplug.scatter_sum(src, index, 0, out=out) is out
    torch.cuda.synchronize()


@pytest.mark.parametrize("shape, dim, kind, dim_size", [c for c in EMPTY_CASES if c.values[3] is not None])
def test_scatter_empty_meta(shape: tuple, dim: int, kind: str, dim_size: Optional[int]) -> None:
    """The Meta kernel agrees on the shapes (dim_size is required there)."""
    src = torch.ones(shape)
    index = empty_case_index(shape, dim, kind, "cpu")
    want = docs_output(src, index, dim, dim_size)
    got = torchplug.scatter_sum(src.to("meta"), index.to("meta"), dim, dim_size=dim_size)
    assert got.device.type == "meta" and got.shape == want.shape and got.dtype == want.dtype


# =========================================================================== every scatter reduction


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape, dim", SPECIAL_LAYOUTS)
@pytest.mark.parametrize("index_kind", ["1d", "full"])
@pytest.mark.parametrize("order", ["given", "sorted"])
@pytest.mark.parametrize("row", scatter_rows_param())
def test_special_values_every_reduction(row: OpRow, dtype: torch.dtype, shape: tuple, dim: int,
                                        index_kind: str, order: str, device: str) -> None:
    """NaN, +-inf and their mixes (inf + -inf, NaN with inf, several NaNs in a
    slot for min/max: the first NaN is the arg) through every reduction, with
    the values and args of the float64 reference (scatter_reduce with
    include_self=False and the empty-slot rules), and out= holding specials."""
    src = special_src(shape, dim, dtype, device)
    index = torch.tensor(SPECIAL_INDEX, device=device)
    if order == "sorted":
        index, permutation = index.sort(stable=True)
        src = src.index_select(dim % src.dim(), permutation)
    if index_kind == "full":
        index = full_index(index, src, dim)
    for sample in (Sample((src, index), dim, SPECIAL_N), Sample((src, index), dim, None)):
        row.check(row.call(sample), sample)
    d = dim % src.dim()
    out_shape = list(shape)
    out_shape[d] = SPECIAL_N + 2
    out = torch.ones(out_shape, dtype=torch.float64)
    for slot, value in {2: NAN, 3: -INF, 4: 1.0, 5: INF, 6: -0.0, 7: -INF}.items():
        out.select(d, slot).fill_(value)
    sample = Sample((src, index), dim, None, out.to(dtype).to(device))
    row.check(row.call(sample), sample, "out= with specials")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape, dim", [p for p in SPECIAL_LAYOUTS if p.values[1] in (0, 1)])
@pytest.mark.parametrize("row", rows_param(SEGMENT_ROWS))
def test_special_values_every_segment_reduction(row: OpRow, dtype: torch.dtype, shape: tuple, dim: int,
                                                device: str) -> None:
    """The same specials through segment_csr and segment_coo (the sorted
    index, or its indptr with the empty slot 5 and one past the last), values
    and args against the reference."""
    index, permutation = torch.tensor(SPECIAL_INDEX).sort(stable=True)
    src = special_src(shape, dim, dtype, device).index_select(dim, permutation.to(device))
    positions = row.positions(index, SPECIAL_N + 1).to(device).view([1] * dim + [-1])
    for sample in (Sample((src, positions), dim_size=SPECIAL_N + 1), Sample((src, positions))):
        row.check(row.call(sample), sample)


@pytest.mark.parametrize("dtype", SCATTER_EMPTY_DTYPES, ids=str)
@pytest.mark.parametrize("shape, dim, kind, dim_size", EMPTY_CASES)
@pytest.mark.parametrize("row", scatter_rows_param())
def test_empty_every_reduction(row: OpRow, shape: tuple, dim: int, kind: str, dim_size: Optional[int],
                               dtype: torch.dtype, device: str) -> None:
    """Zero-size inputs through every reduction: the output size follows the
    rule (max(index) + 1 over the index broadcast to src; 0 when src or the
    index is empty), empty slots hold the reduction's empty value (0; mul: 1)
    and args src.size(dim), and out= of 7s comes back as the reduction of
    nothing into it (7 everywhere, args src.size(dim))."""
    src = torch.ones(shape, dtype=dtype, device=device)
    index = empty_case_index(shape, dim, kind, device)
    sample = Sample((src, index), dim, dim_size)
    outputs = row.call(sample)
    want_n = dim_size if dim_size is not None else default_dim_size(index, src, dim)
    assert outputs[0].size(dim) == want_n
    row.check(outputs, sample)
    row.check(row.call_schema(Sample((src, index), dim, want_n)), Sample((src, index), dim, want_n))
    if src.numel() == 0:
        out = torch.full(outputs[0].shape, 7, dtype=dtype, device=device)
        with_out = Sample((src, index), dim, None, out)
        results = row.call(with_out)
        assert_same_values(results[0], out)
        for position in row.args:
            assert (results[position] == src.size(dim)).all()
    if dtype.is_floating_point:
        leaf = src.detach().clone().requires_grad_()
        result = row.call(Sample((leaf, index), dim, dim_size))[0]
        (g,) = torch.autograd.grad(result, (leaf,), torch.ones_like(result), allow_unused=True)
        assert g is not None and g.shape == src.shape
