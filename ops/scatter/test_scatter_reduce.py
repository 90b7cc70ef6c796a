"""scatter_mean, scatter_mul, scatter_min and scatter_max (and sum through the
same table) against plain PyTorch: torch.scatter_reduce with
include_self=False in float64, torch_scatter's empty-slot rules, args found by
a plain search, gradients by gradcheck."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

import torchplug
from scatter_reference import broadcast_index
from torchplug._reductions import BY_NAME, REDUCTIONS as TABLE

REDUCTIONS = [r.name for r in TABLE]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64]


def make_src(shape, dtype: torch.dtype, reduce: str, device: str) -> torch.Tensor:
    if dtype.is_floating_point:
        values = torch.randn(shape, dtype=torch.float64)
        if reduce == "mul":  # products of many values stay in range
            values = values.sign() * (1 + values.abs() / 50)
        return values.to(dtype).to(device)
    high = 2 if reduce == "mul" else 50
    return torch.randint(-high, high + 1, shape, dtype=dtype).to(device)


def reference(src: torch.Tensor, index: torch.Tensor, dim: int, n: int, reduce: str,
              out: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(values, arg) of the reduction in plain PyTorch, on the CPU, floats in float64."""
    src, index = src.cpu(), index.cpu()
    dim = dim % src.dim()
    full = broadcast_index(index, src, dim)
    shape = list(src.shape)
    shape[dim] = n
    wide = torch.float64 if src.dtype.is_floating_point else torch.int64
    values = src.to(wide)
    count = torch.zeros(shape, dtype=torch.int64).scatter_add(dim, full, torch.ones_like(full))
    if reduce == "mean":
        total = torch.zeros(shape, dtype=wide).scatter_add(dim, full, values)
        if out is not None:
            total += out.cpu().to(wide)
        if wide == torch.int64:
            result = torch.div(total, count.clamp(min=1), rounding_mode="floor")
        else:
            result = total / count.clamp(min=1)
        return result, None
    base = torch.zeros(shape, dtype=wide) if out is None else out.cpu().to(wide)
    result = base.scatter_reduce(dim, full, values, BY_NAME[reduce].native, include_self=out is not None)
    if out is None:
        empty = 1 if reduce == "mul" else 0
        result = torch.where(count == 0, torch.full_like(result, empty), result)
    if reduce not in ("min", "max"):
        return result, None
    # arg: the smallest position along dim holding the result, E if none.
    E = src.size(dim)
    positions = torch.arange(E).view([1] * dim + [-1] + [1] * (src.dim() - dim - 1)).expand(src.shape)
    holds = (values == result.gather(dim, full)) | (values.isnan() & result.gather(dim, full).isnan())
    arg = torch.full(shape, E, dtype=torch.int64).scatter_reduce(
        dim, full, torch.where(holds, positions, E), "amin", include_self=True)
    return result, arg


def tolerance(dtype: torch.dtype) -> dict:
    if dtype in (torch.float16, torch.bfloat16):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float32:
        return dict(rtol=1e-5, atol=1e-5)
    return dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=0, atol=0)


def run(reduce, src, index, dim, n, out=None):
    if reduce in ("min", "max"):
        return getattr(torchplug, "scatter_" + reduce)(src, index, dim, out=out, dim_size=None if out is not None else n)
    return getattr(torchplug, "scatter_" + reduce)(src, index, dim, out=out, dim_size=None if out is not None else n), None


def check(reduce, src, index, dim, n, out=None) -> None:
    want, want_arg = reference(src, index, dim, n, reduce, out)
    got, arg = run(reduce, src, index, dim, n, None if out is None else out.clone())
    assert got.dtype == src.dtype and got.device == src.device
    if src.dtype in (torch.float16, torch.bfloat16):  # reduced in float, rounded once
        want = want.to(src.dtype).to(want.dtype)
    torch.testing.assert_close(got.cpu().to(want.dtype), want, **tolerance(src.dtype), equal_nan=True)
    if want_arg is not None:
        if src.dtype in (torch.float16, torch.bfloat16):  # values are exact: compare in their dtype
            want_arg = reference(src, index, dim, n, reduce, out)[1]
        assert torch.equal(arg.cpu(), want_arg)


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("F", [1, 3, 16, 64])
def test_matches_reference_1d_index(reduce: str, dtype: torch.dtype, F: int, device: str) -> None:
    torch.manual_seed(F)
    E, N = 3000, 200
    src = make_src((E, F), dtype, reduce, device)
    index = torch.randint(0, N - 20, (E,), device=device)  # the last rows stay empty
    check(reduce, src, index, 0, N)
    check(reduce, src, index.sort().values, 0, N)
    hub = torch.where(torch.rand(E, device=device) < 0.5, 7, index)  # one row takes half
    check(reduce, src, hub, 0, N)


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int64])
def test_matches_reference_nd(reduce: str, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(5)
    src = make_src((4, 300, 6), dtype, reduce, device)
    check(reduce, src, torch.randint(0, 40, (300,), device=device), 1, 45)  # 1-D index, outer > 1
    check(reduce, src, torch.randint(0, 40, (4, 300, 6), device=device), 1, 45)  # index of src's shape
    check(reduce, src, torch.randint(0, 40, (4, 300, 1), device=device), -2, 45)  # broadcast index
    check(reduce, src.transpose(0, 2), torch.randint(0, 9, (300,), device=device), 1, 9)  # non-contiguous


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int32])
def test_out_takes_part(reduce: str, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(6)
    src = make_src((500, 8), dtype, reduce, device)
    index = torch.randint(0, 50, (500,), device=device)
    out = make_src((60, 8), dtype, reduce, device)
    check(reduce, src, index, 0, 60, out=out)


@pytest.mark.parametrize("reduce", ["min", "max"])
def test_ties_and_nan(reduce: str, device: str) -> None:
    src = torch.tensor([[1.0], [3.0], [3.0], [float("nan")], [-1.0], [float("nan")], [2.0], [2.0]], device=device)
    index = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2], device=device)
    values, arg = getattr(torchplug, "scatter_" + reduce)(src, index, 0, dim_size=4)
    want = 3.0 if reduce == "max" else 1.0
    assert values[0, 0].item() == want and arg[0, 0].item() == (1 if reduce == "max" else 0)
    assert values[1, 0].isnan() and arg[1, 0].item() == 3  # NaN wins; the first one
    assert values[2, 0].item() == 2.0 and arg[2, 0].item() == 6  # ties: the smallest position
    assert values[3, 0].item() == 0 and arg[3, 0].item() == 8  # empty
    out = torch.full((4, 1), 5.0, device=device)
    values, arg = getattr(torchplug, "scatter_" + reduce)(src, index, 0, out=out)
    assert values is out
    if reduce == "max":
        assert out[0, 0].item() == 5.0 and arg[0, 0].item() == 8  # out's own value won
    assert out[3, 0].item() == 5.0 and arg[3, 0].item() == 8


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_gradients(reduce: str, device: str) -> None:
    torch.manual_seed(7)
    index = torch.randint(0, 8, (40,), device=device)
    src = torch.randn(40, 3, dtype=torch.float64, device=device, requires_grad=True)
    fn = lambda x: torchplug.scatter(x, index, 0, dim_size=10, reduce=reduce)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (src,))
    assert torch.autograd.gradgradcheck(fn, (src,))
    out = torch.randn(10, 3, dtype=torch.float64, device=device, requires_grad=True)
    inplace = lambda o, x: torchplug.scatter(x, index, 0, out=o.clone(), reduce=reduce)  # noqa: E731
    assert torch.autograd.gradcheck(inplace, (out, src))


def test_mul_gradient_with_zeros(device: str) -> None:
    index = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2], device=device)
    src = torch.tensor([2.0, 0.0, 3.0, 0.0, 0.0, 4.0, 5.0, 6.0], dtype=torch.float64, device=device,
                       requires_grad=True)
    out = torchplug.scatter_mul(src, index, 0, dim_size=3)
    out.backward(torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64, device=device))
    # slot 0: one zero, it gets 2 * 3; slot 1: two zeros, every gradient 0; slot 2: no zero.
    want = torch.tensor([0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 6.0, 5.0], dtype=torch.float64)
    assert torch.equal(src.grad.cpu(), want)
    assert torch.autograd.gradcheck(lambda x: torchplug.scatter_mul(x, index, 0, dim_size=3), (src,))


def test_unknown_reduce(device: str) -> None:
    src = torch.randn(4, 2, device=device)
    with pytest.raises(ValueError, match="argument 'reduce' must be one of"):
        torchplug.scatter(src, torch.zeros(4, dtype=torch.long, device=device), 0, reduce="median")


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_registry_and_schema(reduce: str) -> None:
    names = {op.name: op for op in torchplug.registry()}
    for name in ("scatter_" + reduce, "scatter_" + reduce + "_"):
        assert name in names and "CPU" in names[name].backends and names[name].differentiable
        if torchplug.with_cuda:
            assert "CUDA" in names[name].backends


def hub_index(E: int, N: int, device: str) -> torch.Tensor:
    """A random index with two hub rows of 30% and 5% of the entries (rows
    past every hub limit of core/reduce/cuda/hub_rows.cuh), scattered."""
    index = torch.randint(0, N, (E,), device=device)
    shuffled = torch.randperm(E, device=device)
    index[shuffled[: 3 * E // 10]] = 3
    index[shuffled[3 * E // 10: 7 * E // 20]] = N - 1
    return index


def as_bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def hub_src(shape, dtype: torch.dtype, reduce: str, exact: bool) -> torch.Tensor:
    """Values for rows of up to 60K sources, on CUDA. Inexact (the bits depend
    on the order of combination): normal floats, for mul factors within 1/1000
    of +-1 so that products stay finite. Exact in every order and dtype, for
    the reference: small integers, for mul +-1 with a 2 now and then."""
    x = torch.randn(shape, dtype=torch.float64)
    if reduce == "mul":
        values = x.sign() * (2.0 ** (x > 3.5).double() if exact else 1 + x.abs() / 2000)
    else:
        values = x.mul(4).round().clamp(-8, 8) if exact else x
    return values.to(dtype).to("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("F", [1, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["uniform", "hubs", "sorted hubs"])
def test_deterministic_mode_is_bitwise_repeatable(reduce: str, F: int, dtype: torch.dtype, kind: str) -> None:
    """Five runs under torch.use_deterministic_algorithms(True) give the same
    bits, forward and backward, with rows past the long-row limit too."""
    torch.manual_seed(8)
    E, N = 200_000, 5_000
    if kind == "uniform":
        src = make_src((E, F), dtype, reduce, "cuda")
    else:  # results of hub rows checked on exact values (float32 sums of 60K terms round)
        src, exact = hub_src((E, F), dtype, reduce, False), hub_src((E, F), dtype, reduce, True)
    index = torch.randint(0, N, (E,), device="cuda") if kind == "uniform" else hub_index(E, N, "cuda")
    if kind == "sorted hubs":
        index = index.sort().values
    grad_out = torch.randn(N, F, device="cuda").to(dtype)
    torch.use_deterministic_algorithms(True)
    try:
        runs = []
        for _ in range(5):
            leaf = src.detach().requires_grad_()
            values, arg = run(reduce, leaf, index, 0, N)
            values.backward(grad_out)
            runs.append((values.detach(), arg, leaf.grad))
    finally:
        torch.use_deterministic_algorithms(False)
    for values, arg, grad in runs[1:]:
        assert torch.equal(as_bits(values), as_bits(runs[0][0]))
        assert torch.equal(as_bits(grad), as_bits(runs[0][2]))
        if arg is not None:
            assert torch.equal(arg, runs[0][1])
    torch.use_deterministic_algorithms(True)
    try:
        check(reduce, src if kind == "uniform" else exact, index, 0, N)
    finally:
        torch.use_deterministic_algorithms(False)
