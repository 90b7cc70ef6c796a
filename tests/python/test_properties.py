"""Property-based tests (hypothesis) for torchplug.add and every scatter
reduction of the op table (op_table.py: scatter_sum, scatter_mean,
scatter_min, scatter_max, scatter_mul) against plain PyTorch references
computed on the same inputs (scatter_reference.py).

Each property draws a *description* of a case (shapes, dim, dtypes, index
distribution, layout flags, a seed); the tensors themselves are then built with
a seeded ``torch.Generator`` on the CPU and moved to the device under test, so a
failing example prints everything needed to rebuild it. Every test uses
``derandomize=True`` (the same examples on every run, so CI is reproducible)
and ``database=None`` (nothing is written into the tree).

Tolerances
----------
``add``: exact, every dtype. ``a + b`` is a single rounding of the exact sum
(half types are computed in float32 and rounded once, as PyTorch does), so the
result must equal PyTorch's bit for bit, including the sign of zero; NaN only
has to be NaN (its payload is not compared).

``scatter_sum``: the reference is a ``scatter_add_`` of the same terms in
float64 (int64 for integer dtypes), not rounded back. For one output slot let
``k`` be the number of terms summed there (the sources that landed in it, plus
one for the initial value of ``out=``) and ``mag`` the sum of their absolute
values. Any summation order -- a sequential loop, a tree, atomics in any order
-- of ``k`` terms with unit roundoff ``u`` is within ``gamma(k, u) * mag`` of
the exact sum, ``gamma(k, u) = k*u / (1 - k*u)`` (Higham, "Accuracy and
Stability of Numerical Algorithms", 2nd ed., sec. 4.2; ``k - 1`` would do, ``k``
keeps a margin). On the CPU torchplug sums sequentially per output row (in
index order, per thread chunk when the work is split), on CUDA with atomics
and warp/segment trees in an order that varies; the bound covers every one of
those orders, so it is the same on both devices.

* int32/int64: exact (values stay far from overflow).
* float64: ``(gamma(k, 2**-53) + gamma(k, 2**-53)) * mag`` -- the kernel's
  error plus the float64 reference's own.
* float32: ``(gamma(k, 2**-24) + gamma(k, 2**-53)) * mag`` -- float32
  accumulation plus the reference's error.
* float16/bfloat16: the kernel adds in float32 and rounds once to the output
  dtype: ``0.5 * ulp(actual) + (gamma(k, 2**-24) + gamma(k, 2**-53)) * mag``.
  Rounding to nearest moves a value by at most half the spacing of the dtype
  at the rounded result (subnormal spacing below the normal range).

An empty slot (``k = 0``) must be exactly 0. Inputs are scaled so no sum can
overflow, and every float result is checked to be finite first (an ``inf``
would make the relative bound vacuous).

The other reductions (scatter_reference.assert_reduced_close):

* ``scatter_min``/``scatter_max``: exact values (a selection, no rounding)
  and exact args (the smallest source position holding the result,
  ``src.size(dim)`` for an empty slot or one won by out='s own value).
* ``scatter_mean``: the sum's bound divided by the count, plus one rounding
  of the quotient (``u * |mean|``), plus half an ulp for half types;
  integers floor-divide exactly.
* ``scatter_mul``: ``(gamma(k, u) + gamma(k, 2**-53)) * |product|`` (each
  product rounds once), plus half an ulp for half types; the factors are
  drawn near 1 (op_table.values) so no product overflows or underflows.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import torchplug
from composite_rows import IndexCompositeRow
from op_table import ROWS, OpRow, Sample, assert_bitwise, rows_param, values as row_values
from scatter_reference import (Reduced, assert_reduced_close, broadcast_index, default_dim_size, gamma,
                               reduce_grad_reference, reduce_reference, ulp)
from scatter_rows import SEGMENT_ROWS, scatter_rows_param

# The `device` fixture (conftest.py) is function scoped; hypothesis warns that it
# is not reset between examples. It is a plain string, so that is harmless.
PROPERTY = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
ADD_DTYPES = FLOATS + [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
SCATTER_DTYPES = FLOATS + [torch.int32, torch.int64]

# Integer value ranges for add. The 8- and 16-bit types use their whole range
# (a same-dtype sum wraps around, as in PyTorch); int32/int64 stay where a sum
# cannot overflow (signed overflow is undefined behaviour in C++).
ADD_INT_RANGES = {
    torch.uint8: (0, 256),
    torch.int8: (-128, 128),
    torch.int16: (-(2**15), 2**15),
    torch.int32: (-(2**30), 2**30),
    torch.int64: (-(2**62), 2**62),
}


# --------------------------------------------------------------------------- building tensors


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_values(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, scale: float,
                  int_range: tuple[int, int]) -> torch.Tensor:
    """A CPU tensor of `shape`: normal(0, scale) for floats (drawn in float64,
    rounded once to `dtype`), uniform in `int_range` for integers."""
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    lo, hi = int_range
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def with_layout(make, shape: tuple[int, ...], layout: str, g: torch.Generator,
                device: str = "cpu") -> torch.Tensor:
    """``make(shape)`` (a CPU tensor) moved to `device`, as a tensor of the
    requested layout and the same shape (the view is taken on the device:
    ``.to()`` would make a non-dense view contiguous):

    * ``contiguous``
    * ``strided``: every other element of a larger tensor (stride 2 innermost,
      storage offset 1)
    * ``permuted``: a contiguous tensor of permuted shape, permuted back
    """
    if layout == "contiguous":
        return make(shape).to(device)
    if layout == "strided":
        return make(tuple(shape) + (2,)).to(device)[..., 1]
    if layout == "permuted":
        perm = torch.randperm(len(shape), generator=g).tolist()
        inverse = [perm.index(d) for d in range(len(shape))]
        return make(tuple(shape[p] for p in perm)).to(device).permute(*inverse)
    raise AssertionError(layout)


def draw_index_values(count: int, n: int, dist: str, g: torch.Generator) -> torch.Tensor:
    """`count` int64 slot numbers in [0, n) drawn from `dist`:

    * ``uniform``
    * ``powerlaw``: P(slot of rank r) ~ (r + 1) ** -alpha, alpha in {1, 1.5, 2.5}
      (a few heavy slots and a long tail, like node degrees); ranks are
      assigned to slots by a random permutation, so the heavy slot moves
    * ``all-equal``: one random slot for every entry
    """
    if count == 0:
        return torch.empty(0, dtype=torch.int64)
    if dist == "uniform":
        return torch.randint(0, n, (count,), generator=g)
    if dist == "powerlaw":
        alpha = [1.0, 1.5, 2.5][int(torch.randint(0, 3, (1,), generator=g))]
        weights = (torch.arange(n, dtype=torch.float64) + 1) ** -alpha
        ranks = torch.multinomial(weights, count, replacement=True, generator=g)
        return torch.randperm(n, generator=g)[ranks]
    if dist == "all-equal":
        return torch.full((count,), int(torch.randint(0, n, (1,), generator=g)), dtype=torch.int64)
    raise AssertionError(dist)


def make_index(shape: tuple[int, ...], along: int, n: int, dist: str, sort: bool,
               layout: str, g: torch.Generator, device: str = "cpu") -> torch.Tensor:
    """An int64 index of `shape` on `device` with values from `dist`; sorted
    along `along` when `sort`; laid out as `layout` (see with_layout)."""

    def make(s: tuple[int, ...]) -> torch.Tensor:
        return draw_index_values(math.prod(s), n, dist, g).view(s)

    # Draw in the final logical order, then sort, then re-lay out: layout must
    # not change the values.
    index = make(shape)
    if sort and index.numel() > 0:
        index = index.sort(dim=along).values
    holder = with_layout(lambda s: torch.empty(s, dtype=torch.int64), shape, layout, g, device)
    return holder.copy_(index)


# --------------------------------------------------------------------------- references


# The scatter references (every reduction, its gradient) and the error bound of
# the module docstring live in scatter_reference.py (reduce_reference,
# assert_reduced_close), shared with the op table (op_table.py).


def check_outputs(row: OpRow, outputs: tuple, ref: Reduced, dtype: torch.dtype, context: str) -> None:
    """The values within the row's bound, every arg exactly."""
    assert_reduced_close(outputs[0].cpu(), _cpu(ref), row.reduce, dtype, context)
    assert len(outputs) == 1 + len(row.args), context
    for position in row.args:
        torch.testing.assert_close(outputs[position].cpu(), ref.arg.cpu(), rtol=0, atol=0,
                                   msg=lambda m: f"{context}: arg\n{m}")


def _cpu(ref: Reduced) -> Reduced:
    return Reduced(*(None if t is None else t.cpu() for t in (ref.value, ref.arg, ref.count, ref.terms, ref.mag)))


def _tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


# --------------------------------------------------------------------------- add


@st.composite
def add_cases(draw):
    """Two broadcastable shapes (0-d and zero-size dims included), two dtypes
    (any pair: type promotion), layouts, a value scale and a seed."""
    rank = draw(st.integers(0, 4))
    full = [draw(st.integers(0, 5)) for _ in range(rank)]

    def operand_shape() -> tuple[int, ...]:
        r = draw(st.integers(0, rank))
        tail = full[rank - r:]
        return tuple(1 if draw(st.booleans()) else s for s in tail)

    shape_a, shape_b = operand_shape(), operand_shape()
    dtype_a = draw(st.sampled_from(ADD_DTYPES))
    dtype_b = draw(st.sampled_from(ADD_DTYPES))
    layouts = st.sampled_from(["contiguous", "strided", "permuted"])
    # 1e5 overflows float16 now and then: inf and nan results are compared too.
    scale = draw(st.sampled_from([1.0, 1e-3, 1e3, 1e5, 1e-6]))
    return dict(shape_a=shape_a, shape_b=shape_b, dtype_a=dtype_a, dtype_b=dtype_b,
                layout_a=draw(layouts), layout_b=draw(layouts), scale=scale,
                seed=draw(st.integers(0, 2**32 - 1)))


def build_add_operands(case: dict, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = generator(case["seed"])

    def operand(shape, dtype, layout):
        rng = ADD_INT_RANGES.get(dtype, (0, 1))
        make = lambda s: random_values(s, dtype, g, case["scale"], rng)  # noqa: E731
        return with_layout(make, shape, layout if len(shape) > 0 else "contiguous", g, device)

    a = operand(case["shape_a"], case["dtype_a"], case["layout_a"])
    b = operand(case["shape_b"], case["dtype_b"], case["layout_b"])
    return a, b


@settings(max_examples=500, **PROPERTY)
@given(case=add_cases())
def test_add_matches_torch(case: dict, device: str) -> None:
    a, b = build_add_operands(case, device)
    expected = a + b
    assert_bitwise(torchplug.add(a, b), expected, f"add {case}")
    assert_bitwise(torchplug.add(b, a), b + a, f"add swapped {case}")


# --------------------------------------------------------------------------- scatter_sum


@st.composite
def scatter_cases(draw, index_kinds=("1d", "full"), max_rank: int = 4, max_e: int = 40,
                  max_other: int = 4, max_slots: int = 12, out_of_range: bool = False,
                  scales: tuple[float, ...] = (1.0, 1e-3, 1e2), min_rank: int = 1, min_e: int = 0,
                  min_other: int = 0):
    """One scatter_sum call: src shape (zero-size dims included), dim (negative
    too), dtype, index kind and distribution, out= / dim_size, layouts."""
    rank = draw(st.integers(min_rank, max_rank))
    dim = draw(st.integers(-rank, rank - 1))
    d = dim % rank
    shape = [draw(st.integers(min_other, max_other)) for _ in range(rank)]
    shape[d] = draw(st.integers(min_e, max_e))
    kind = draw(st.sampled_from(index_kinds))
    index_shape = list(shape)
    if kind == "1d":
        index_shape = [shape[d]]
    elif kind == "broadcast":
        # A prefix of src's shape through dim at least, other dims set to 1 at
        # random (torch_scatter broadcasting: trailing dims added, 1s expanded).
        keep = draw(st.integers(d + 1, rank))
        index_shape = [1 if (i != d and draw(st.booleans())) else s for i, s in enumerate(shape[:keep])]
    return dict(
        shape=tuple(shape), dim=dim, kind=kind, index_shape=tuple(index_shape),
        dtype=draw(st.sampled_from(SCATTER_DTYPES)),
        slots=draw(st.integers(1, max_slots)),
        dist=draw(st.sampled_from(["uniform", "powerlaw", "all-equal"])),
        sort=draw(st.booleans()),
        # out=: none, or out given (with dim_size too, or not), in a layout.
        out=draw(st.sampled_from([None, "contiguous", "strided", "permuted"])),
        pass_dim_size=draw(st.booleans()),
        extra=draw(st.integers(0, 3)),  # dim_size - (max + 1)
        src_layout=draw(st.sampled_from(["contiguous", "strided", "permuted"])),
        index_layout=draw(st.sampled_from(["contiguous", "strided", "permuted"])),
        # 1e-6 puts float16 values in its subnormal range.
        scale=draw(st.sampled_from(list(scales) + [1e-6])),
        bad_fraction=draw(st.sampled_from([0.05, 0.3, 1.0])) if out_of_range else 0.0,
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def build_scatter_inputs(case: dict, device: str, reduce: str = "sum"):
    """(src, index, dim_size, out or None) on `device` for a drawn case; for
    mul, src and out then take factors near 1 (op_table.values) in place, so
    that no product overflows or underflows whatever the fan-in."""
    g = generator(case["seed"])
    dtype = case["dtype"]
    int_range = (-1000, 1000) if dtype == torch.int32 else (-(2**40), 2**40)
    shape, dim = case["shape"], case["dim"]
    d = dim % len(shape)
    make_src = lambda s: random_values(s, dtype, g, case["scale"], int_range)  # noqa: E731
    src = with_layout(make_src, shape, case["src_layout"], g, device)
    index_dim = 0 if case["kind"] == "1d" else d
    index = make_index(case["index_shape"], index_dim, case["slots"], case["dist"], case["sort"],
                       case["index_layout"], g, device)
    if case["bad_fraction"] > 0 and index.numel() > 0:
        # Replace some values with out-of-range ones (negative or >= slots),
        # then sort again if the case is sorted: sorted indices with leading
        # negatives are a path of their own on CUDA.
        n = case["slots"]
        bad = torch.rand(index.shape, generator=g) < case["bad_fraction"]
        wild = torch.where(torch.rand(index.shape, generator=g) < 0.5,
                           -torch.randint(1, 4, index.shape, generator=g),
                           n + case["extra"] + torch.randint(0, 4, index.shape, generator=g))
        values = torch.where(bad, wild, index.cpu())
        if case["sort"]:
            values = values.sort(dim=index_dim).values
        index = index.copy_(values)  # keeps the layout (and the device)
    dim_size = default_dim_size(index, src, dim) + case["extra"]
    if case["bad_fraction"] > 0:
        dim_size = case["slots"] + case["extra"]
    out = None
    if case["out"] is not None:
        out_shape = list(shape)
        out_shape[d] = dim_size
        out = with_layout(make_src, tuple(out_shape), case["out"], g, device)
    if reduce == "mul":
        src.copy_(row_values(tuple(src.shape), src.dtype, "mul", g))
        if out is not None:
            out.copy_(row_values(tuple(out.shape), out.dtype, "mul", g))
    return src, index, dim_size, out


def run_scatter(row: OpRow, case: dict, device: str) -> None:
    src, index, dim_size, out = build_scatter_inputs(case, device, row.reduce)
    dim = case["dim"]
    context = (f"{row.name} {case}; src {tuple(src.shape)} {tuple(src.stride())}, "
               f"index {tuple(index.shape)} {tuple(index.stride())}")
    fn = row.fn()
    if out is None:
        size_arg = dim_size if case["pass_dim_size"] else None
        ref = reduce_reference(src, index, dim, row.reduce, size_arg, None)
        outputs = _tuple(fn(src, index, dim, dim_size=size_arg))
        assert outputs[0].device == src.device, context
        check_outputs(row, outputs, ref, src.dtype, context)
        return
    # out=: reduced into in place, returned, written through the caller's view.
    ref = reduce_reference(src, index, dim, row.reduce, None, out)
    backing = out._base if out._base is not None else out
    backing_before = backing.clone()
    ptr = out.data_ptr()
    size_arg = dim_size if case["pass_dim_size"] else None
    outputs = _tuple(fn(src, index, dim, out=out, dim_size=size_arg))
    assert outputs[0] is out, context
    assert out.data_ptr() == ptr, context
    check_outputs(row, outputs, ref, src.dtype, context)
    # Only the elements of the view changed in the backing storage.
    expected_backing = backing_before.clone()
    if out._base is not None:
        # Rebuild the view on the copy with the same geometry, write the result there.
        expected_backing.as_strided(out.shape, out.stride(), out.storage_offset()).copy_(out)
        torch.testing.assert_close(backing, expected_backing, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{context}: write outside the out= view\n{m}")


@pytest.mark.parametrize("row", scatter_rows_param())
@settings(max_examples=500, **PROPERTY)
@given(case=scatter_cases())
def test_scatter_matches_reference(row: OpRow, case: dict, device: str) -> None:
    """1-D and full-shape index; every dtype; with and without out= / dim_size."""
    run_scatter(row, case, device)


def _case(**fields) -> dict:
    """A scatter case spelled out (for @example), defaults for what is not given."""
    case = dict(dim=0, kind="broadcast", dtype=torch.float32, slots=3, dist="uniform", sort=False,
                out=None, pass_dim_size=False, extra=0, src_layout="contiguous",
                index_layout="contiguous", scale=1.0, bad_fraction=0.0, seed=0)
    case.update(fields)
    return case


@pytest.mark.parametrize("row", scatter_rows_param())
@settings(max_examples=500, **PROPERTY)
@given(case=scatter_cases(index_kinds=("broadcast",)))
# Found by this property with more examples: an index of shape [1, 1, 2] over a
# src of shape [1, 0, 2] (dim 0), dim_size left to the default.
@example(case=_case(shape=(1, 0, 2), index_shape=(1, 1, 2)))
def test_scatter_broadcast_index(row: OpRow, case: dict, device: str) -> None:
    """Index shapes that broadcast to src: a prefix of src's shape (trailing
    dims added) with size-1 dims (expanded)."""
    run_scatter(row, case, device)


@pytest.mark.parametrize("row", scatter_rows_param())
@settings(max_examples=40, **PROPERTY)
@given(case=scatter_cases(index_kinds=("1d", "1d", "full"), min_rank=2, max_rank=3, min_e=6000,
                          max_e=8000, min_other=6, max_other=12, max_slots=3000, scales=(1.0, 1e-3)))
def test_scatter_large(row: OpRow, case: dict, device: str) -> None:
    """Sizes past the CPU kernel's serial cutoff (2**15 source elements), so the
    multi-threaded schedules run (per-thread private outputs when the output is
    small against E, row ownership otherwise, column ownership for a full index);
    on CUDA, rows past the segment kernel's 1024-source limit (long-row kernels)."""
    run_scatter(row, case, device)


@pytest.mark.parametrize("row", scatter_rows_param())
@settings(max_examples=300, **PROPERTY)
@given(case=scatter_cases(index_kinds=("1d", "full", "broadcast"), out_of_range=True))
def test_scatter_out_of_range(row: OpRow, case: dict, device: str) -> None:
    """docs/ops.md: on CPU an index value outside [0, dim_size) raises IndexError
    and nothing is written; on CUDA such values are skipped (with checked mode
    on, torchplug.set_checks(True), CUDA raises like the CPU). Non-empty src only
    (what an out-of-range value means for an empty src is not this property's
    business). Sorted cases sort after corrupting, so negatives lead."""
    src, index, dim_size, out = build_scatter_inputs(case, device, row.reduce)
    if src.numel() == 0 or index.numel() == 0:
        return
    dim = case["dim"]
    d = dim % src.dim()
    full = broadcast_index(index, src, d)
    keep = (full >= 0) & (full < dim_size)
    if bool(keep.all()):
        return  # nothing out of range after all
    context = f"{row.name} out-of-range {case}"
    fn = row.fn()
    if torchplug.validates_indices(device):
        if out is None:
            with pytest.raises(IndexError, match=rf"torchplug::{row.name}.*'index'"):
                fn(src, index, dim, dim_size=dim_size)
        else:
            before = out.clone()
            with pytest.raises(IndexError, match=rf"torchplug::{row.name}.*'index'"):
                fn(src, index, dim, out=out)
            torch.testing.assert_close(out, before, rtol=0, atol=0, msg=lambda m: f"{context}\n{m}")
        return
    if out is None:
        ref = reduce_reference(src, index, dim, row.reduce, dim_size, None, keep=keep)
        check_outputs(row, _tuple(fn(src, index, dim, dim_size=dim_size)), ref, src.dtype, context)
    else:
        ref = reduce_reference(src, index, dim, row.reduce, None, out, keep=keep)
        outputs = _tuple(fn(src, index, dim, out=out))
        check_outputs(row, outputs, ref, src.dtype, context)
    torch.cuda.synchronize()


# --------------------------------------------------------------------------- gradients


@st.composite
def add_grad_cases(draw):
    """add_cases restricted to float dtypes (the differentiable ones)."""
    case = draw(add_cases())
    case["dtype_a"] = draw(st.sampled_from(FLOATS))
    case["dtype_b"] = draw(st.sampled_from(FLOATS))
    case["scale"] = draw(st.sampled_from([1.0, 1e-3, 1e3]))
    return case


@settings(max_examples=300, **PROPERTY)
@given(case=add_grad_cases())
def test_add_grad_matches_torch(case: dict, device: str) -> None:
    """Each gradient is grad_out summed back to the input's shape and cast to its
    dtype, the same reduction PyTorch's engine applies to ``a + b``: exact."""
    a, b = build_add_operands(case, device)
    a.requires_grad_()
    b.requires_grad_()
    out = torchplug.add(a, b)
    g = generator(case["seed"] + 1)
    grad_out = random_values(tuple(out.shape), out.dtype, g, 1.0, (0, 1)).to(device)
    got = torch.autograd.grad(out, (a, b), grad_out)
    want = torch.autograd.grad(a + b, (a, b), grad_out)
    for x, gx, wx in zip((a, b), got, want):
        assert gx.shape == x.shape and gx.dtype == x.dtype
        assert_bitwise(gx, wx, f"add grad {case}")


@pytest.mark.parametrize("row", scatter_rows_param())
@settings(max_examples=300, **PROPERTY)
@given(case=scatter_cases(index_kinds=("1d", "full", "broadcast")).filter(
    lambda c: c["dtype"].is_floating_point))
def test_scatter_grad_matches_closed_form(row: OpRow, case: dict, device: str) -> None:
    """The gradients w.r.t. src and out='s initial value against the closed
    forms of scatter_reference.reduce_grad_reference. sum (grad_out gathered
    at the broadcast index; d/d(out) is grad_out itself) and min/max
    (grad_out at the arg position only) do no arithmetic: exact. mean and mul
    round: within ``(gamma(k + 2, u) + gamma(k + 2, 2**-53)) * |expected|``
    with k the terms of the slot and u the dtype's unit roundoff, plus one
    ulp for float16/bfloat16."""
    src, index, dim_size, out = build_scatter_inputs(case, device, row.reduce)
    d = case["dim"] % src.dim()
    src = src.detach().requires_grad_()
    g = generator(case["seed"] + 1)
    fn = row.fn()
    if out is None:
        result = _tuple(fn(src, index, case["dim"], dim_size=dim_size))[0]
        inputs = (src,)
    else:
        leaf = out.detach().clone().requires_grad_()
        target = leaf * 1  # a non-leaf that out= may write into
        result = _tuple(fn(src, index, case["dim"], out=target))[0]
        inputs = (src, leaf)
    grad_out = random_values(tuple(result.shape), src.dtype, g, 1.0, (0, 1)).to(device)
    grads = torch.autograd.grad(result, inputs, grad_out, allow_unused=True)
    grads = tuple(torch.zeros_like(x) if gx is None else gx for x, gx in zip(inputs, grads))
    want = reduce_grad_reference(src.detach(), index, case["dim"], row.reduce, grad_out,
                                 None if out is None else out, dim_size if out is None else None)
    ref = reduce_reference(src.detach(), index, case["dim"], row.reduce, dim_size if out is None else None,
                           out)
    terms = [ref.terms.gather(d, broadcast_index(index, src, d)) if src.numel() else torch.zeros_like(src,
             dtype=torch.float64), ref.terms]
    names = ["src", "out"]
    for got, expected, k, name in zip(grads, want, terms, names):
        context = f"{row.name} grad {name} {case}"
        assert got.shape == inputs[names.index(name)].shape and got.dtype == src.dtype, context
        if row.reduce in ("sum", "min", "max"):
            assert_bitwise(got, expected.to(src.dtype), context)
            continue
        u = 2.0**-53 if src.dtype == torch.float64 else torch.finfo(src.dtype).eps / 2
        tol = (gamma(k + 2, u) + gamma(k + 2, 2.0**-53)) * expected.abs()
        if src.dtype in (torch.float16, torch.bfloat16):
            tol = tol + ulp(expected, src.dtype)
        err = (got.double() - expected).abs()
        assert bool((err <= tol).all()), (
            f"{context}: worst error {float((err - tol).max())} over the bound")


# --------------------------------------------------------------------------- large fan-in


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("F", [1, 16])
@pytest.mark.parametrize("dist", ["all-equal", "uniform"])
@pytest.mark.parametrize("row", scatter_rows_param())
def test_large_fan_in_is_exact_where_the_bound_is_zero(row: OpRow, dist: str, F: int, threads: int,
                                                       device: str) -> None:
    """E = 200K float32 sources into 1000 slots (all-equal: into one). With
    random values the bound at this fan-in, gamma(2e5, 2**-24) * mag, is about
    1% of mag: wide enough to pass a row added twice or dropped. So the values
    here are integers of magnitude at most 63 (mul: +-1): every partial sum
    (200K * 63 < 2**24) and product is a float32 integer, the accumulation
    error is zero in any order, and sum, min, max and mul must equal the
    reference exactly; mean is that exact sum divided by the count (a
    division or a multiplication by the reciprocal: two roundings at most,
    2u * |mean|). A lost or doubled source changes a slot's sum by at least 1
    (a mean by at least 1 / count, far above 2u * |mean| here)."""
    E, N = 200_000, 1000
    g = generator(F + 7)
    if row.reduce == "mul":
        src = torch.randint(0, 2, (E, F), generator=g).float().mul_(2).sub_(1)
    else:
        src = torch.randint(-63, 64, (E, F), generator=g).float()
        src[src == 0] = 1  # every source changes its slot's sum
    index = draw_index_values(E, N, dist, g)
    index[-1] = index[0]
    src, index = src.to(device), index.to(device)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        outputs = _tuple(row.fn()(src, index, 0, dim_size=N))
    finally:
        torch.set_num_threads(before)
    ref = reduce_reference(src, index, 0, row.reduce, N)
    got = outputs[0].double().cpu()
    want = ref.value.cpu()
    if row.reduce == "mean":
        torch.testing.assert_close(got, want, rtol=2.0**-23, atol=0)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    for position in row.args:
        torch.testing.assert_close(outputs[position].cpu(), ref.arg.cpu(), rtol=0, atol=0)


# --------------------------------------------------------------------------- segments


@st.composite
def segment_cases(draw) -> dict:
    """Segment lengths (empty ones, and now and then one past CUDA's
    long-row limit of 1024), positions past the last segment, a rank of 1 to
    3 with the segments along dim 0 or 1, one indptr or index for every slice
    or one per slice, every dtype."""
    lengths = draw(st.lists(st.one_of(st.integers(0, 12), st.integers(1000, 1300)), max_size=12))
    return dict(
        lengths=lengths,
        tail=draw(st.integers(0, 3)),
        rank=draw(st.integers(1, 3)),
        dim=draw(st.integers(0, 1)),
        slices=draw(st.integers(1, 3)),
        per_slice=draw(st.booleans()),
        width=draw(st.integers(1, 9)),
        dtype=draw(st.sampled_from(SCATTER_DTYPES)),
        seed=draw(st.integers(0, 2**16)),
    )


@pytest.mark.parametrize("row", rows_param(SEGMENT_ROWS))
@settings(max_examples=60, **PROPERTY)
@given(case=segment_cases())
def test_segment_matches_reference(row: OpRow, case: dict, device: str) -> None:
    """segment_csr (one indptr, or one per slice) and segment_coo (the sorted
    index) against the plain-PyTorch reference, positions past the last
    segment belonging to none (csr) or to the last slot (coo: no gaps)."""
    g = generator(case["seed"])
    dim = min(case["dim"], case["rank"] - 1)
    E = sum(case["lengths"]) + (case["tail"] if row.past_last_segment else 0)
    shape = [case["slices"]] * dim + [E] + [case["width"]] * (case["rank"] - dim - 1)
    src = row_values(tuple(shape), case["dtype"], row.reduce, g).to(device)
    slices = case["slices"] if case["per_slice"] and dim > 0 else 1
    n = len(case["lengths"])
    per_slice = []
    for _ in range(slices):
        lengths = torch.tensor(case["lengths"], dtype=torch.long)[torch.randperm(n, generator=g)]
        per_slice.append(row.positions(torch.repeat_interleave(torch.arange(n), lengths), n))
    positions = torch.stack(per_slice).view([slices] * dim + [-1]) if dim else per_slice[0]
    sample = Sample((src, positions.to(device)), dim_size=n)  # segment_csr's size is its indptr's
    row.check(row.call(sample), sample)



# --------------------------------------------------------------------------- composites

COMPOSITE_ROWS = [row for row in ROWS if isinstance(row, IndexCompositeRow)]


@pytest.mark.parametrize("row", rows_param(COMPOSITE_ROWS))
@settings(max_examples=150, **PROPERTY)
@given(case=scatter_cases(index_kinds=("1d", "full", "broadcast")).filter(
    lambda c: c["dtype"].is_floating_point))
def test_composite_matches_reference(row: OpRow, case: dict, device: str) -> None:
    """Every composite over any shape, dim, index kind, distribution and
    layout against composite_reference (float64 plain PyTorch), within its
    dtype's tolerance; softmax's groups sum to 1 and its values lie in [0, 1]."""
    src, index, dim_size, out = build_scatter_inputs(case, device)
    if not row.inplace:
        out = None
    sample = Sample((src, index), case["dim"], dim_size if out is None and case["pass_dim_size"] else None, out,
                    f"{case}")
    outputs = row.call(sample)
    row.check(outputs, sample)
    if row.name == "scatter_softmax" and src.numel() > 0:
        y = outputs[0].double()
        assert bool(((y >= 0) & (y <= 1)).all()), case
        totals = torchplug.scatter_sum(y, index, case["dim"], dim_size=dim_size)
        members = torchplug.scatter_sum(torch.ones_like(y), index, case["dim"], dim_size=dim_size)
        rtol = 1e-2 if src.dtype in (torch.float16, torch.bfloat16) else 1e-5
        torch.testing.assert_close(totals[members > 0], torch.ones_like(totals[members > 0]), rtol=rtol, atol=rtol)
