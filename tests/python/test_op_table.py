"""Every op of the table (op_table.py) against its plain-PyTorch reference:
each sample (dtypes x devices x shapes) through the friendly function, the
schema-level ops and torchplug.scatter(reduce=); arg outputs exactly; out=
written in place and returned; gradients against the closed forms and by
gradcheck / gradgradcheck in float64; Meta shapes; CPU index errors."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import torchplug
from op_table import ROWS, OpRow, Sample, rows_param
from scatter_rows import SCATTER_ROWS, scatter_rows_param


def _dtype_params(rows) -> list:
    return [pytest.param(row, dtype, id=f"{row.name}-{str(dtype)[6:]}")
            for row in rows for dtype in row.dtypes]


@pytest.mark.parametrize("row, dtype", _dtype_params(ROWS))
def test_matches_reference(row: OpRow, dtype: torch.dtype, device: str) -> None:
    for sample in row.samples(device, dtype, seed=1):
        row.check(row.call(sample), sample, "friendly function")
        row.check(row.call_schema(sample), sample, "schema op")
        generic = row.call_generic(sample)
        if generic is not None:
            row.check(generic, sample, "torchplug.scatter(reduce=)", values_only=True)


@pytest.mark.parametrize("row, dtype", _dtype_params(SCATTER_ROWS))
def test_out_written_in_place_and_returned(row: OpRow, dtype: torch.dtype, device: str) -> None:
    """out= is the tensor returned, written through the caller's (possibly
    non-contiguous) view, and nothing outside the view changes."""
    for sample in row.samples(device, dtype, seed=2):
        if sample.out is None:
            continue
        backing = torch.zeros(sample.out.numel() * 2, dtype=dtype, device=device)
        out = backing[1::2].view(sample.out.shape) if sample.out.is_contiguous() \
            else backing[1::2].view(sample.out.t().shape).t()
        out.copy_(sample.out)
        results = row.call(sample, out=out)
        assert results[0] is out, sample
        assert not backing[0::2].any(), f"{sample}: wrote outside out="
        row.check(results, sample)


@pytest.mark.parametrize("row", rows_param())
def test_gradcheck(row: OpRow, device: str) -> None:
    if not row.differentiable:
        pytest.skip(f"{row.name} has no gradients")
    tol = row.cuda_nondet_tol if device == "cuda" else 0.0
    for sample in row.grad_samples(device, seed=3):
        inputs, call = _differentiable_call(row, sample)
        assert gradcheck(call, inputs, nondet_tol=tol), sample
        if row.gradgrad:
            assert gradgradcheck(call, inputs, nondet_tol=tol), sample


def _differentiable_call(row: OpRow, sample: Sample):
    """(inputs, f) where f(*inputs) returns the row's differentiable outputs:
    for out= the initial value is a leaf that f clones before the call."""
    leaves = tuple(t.detach().clone().requires_grad_() for t in sample.inputs[:row.leaf_count])
    keep = row.differentiable

    def pick(results: tuple) -> tuple:
        return tuple(results[i] for i in keep)

    if sample.out is None:
        return leaves, lambda *xs: pick(row.call_with(xs, sample))
    init = sample.out.detach().clone().requires_grad_()
    return leaves + (init,), lambda *xs: pick(row.call_with(xs[:-1], sample, out=xs[-1].clone()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("row", rows_param())
def test_grad_matches_reference(row: OpRow, dtype: torch.dtype, device: str) -> None:
    """The gradient of output 0 against the closed form (scatter_reference),
    for every float sample (mul: with zeros in slots; min/max: ties included,
    where the gradient goes to the arg only)."""
    if not row.differentiable:
        pytest.skip(f"{row.name} has no gradients")
    for sample in row.samples(device, dtype, seed=4):
        if any(not t.dtype.is_floating_point for t in sample.inputs[:1]):
            continue
        if any(t.dtype != dtype for t in sample.inputs[:row.leaf_count]):
            continue  # mixed-dtype operands (add's promotion sample)
        if sample.out is not None and not row.out_differentiable:
            continue
        leaves = [t.detach().clone().requires_grad_() for t in sample.inputs[:row.leaf_count]]
        if sample.out is not None:
            init = sample.out.detach().clone().requires_grad_()
            result = row.call_with(leaves, sample, out=init * 1)[0]
            leaves.append(init)
        else:
            result = row.call_with(leaves, sample)[0]
        g = torch.randn(result.shape, dtype=torch.float64).to(dtype).to(device)
        got = torch.autograd.grad(result, leaves, g, allow_unused=True)
        want = row.grad_reference(sample, g)
        for leaf, x, w in zip(leaves, got, want):
            x = torch.zeros_like(leaf) if x is None else x
            assert x.shape == leaf.shape and x.dtype == leaf.dtype, sample
            rtol = 1e-12 if dtype == torch.float64 else 1e-5
            torch.testing.assert_close(x.double(), w.double(), rtol=rtol, atol=rtol,
                                       msg=lambda m: f"{row.name} {sample}\n{m}")


@pytest.mark.parametrize("row", scatter_rows_param())
def test_meta_shapes(row: OpRow) -> None:
    """The Meta kernel gives the shapes and dtypes of the CPU results (dim_size
    given: the output size is data-dependent otherwise)."""
    for sample in row.samples("cpu", torch.float32, seed=5):
        if sample.out is not None:
            continue
        src, index = sample.inputs
        n = sample.dim_size if sample.dim_size is not None else row.reference(sample).value.size(sample.dim)
        want = row.call(Sample(sample.inputs, sample.dim, n))
        got = row.fn()(src.to("meta"), index.to("meta"), sample.dim, dim_size=n)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype, sample


@pytest.mark.parametrize("row", scatter_rows_param())
def test_cpu_index_out_of_range_raises(row: OpRow) -> None:
    """CPU validates index values: IndexError naming the op and the argument,
    out= untouched."""
    src = torch.randn(6, 3)
    for bad in (-1, 4):
        index = torch.tensor([0, 1, bad, 2, 3, 0])
        with pytest.raises(IndexError, match=f"torchplug::{row.name}.*'index'"):
            row.fn()(src, index, 0, dim_size=4)
        out = torch.randn(4, 3)
        before = out.clone()
        with pytest.raises(IndexError, match=f"torchplug::{row.name}.*'index'"):
            row.fn()(src, index, 0, out=out)
        torch.testing.assert_close(out, before, rtol=0, atol=0)


@pytest.mark.parametrize("reduce", ["median", "prod", "", "SUM"])
def test_scatter_unknown_reduce_is_a_value_error(reduce: str, device: str) -> None:
    src = torch.randn(4, 2, device=device)
    index = torch.tensor([0, 1, 0, 1], device=device)
    with pytest.raises(ValueError, match=reduce if reduce else "reduce"):
        torchplug.scatter(src, index, 0, reduce=reduce)


def test_scatter_add_is_sum(device: str) -> None:
    src = torch.randn(9, 2, device=device)
    index = torch.tensor([0, 1, 0, 1, 3, 3, 3, 0, 2], device=device)
    torch.testing.assert_close(torchplug.scatter(src, index, 0, reduce="add"),
                               torchplug.scatter_sum(src, index, 0), rtol=0, atol=0)
