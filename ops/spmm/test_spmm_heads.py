"""spmm with one weight per head (value [nnz, H], x [N, H, C]) and sddmm per
head against plain PyTorch in float64 on the same inputs: every head count
from 1 to 8, head widths 1, 3, 8, 16, 64 and 200, rows of 0 and 1 edges and
past CUDA's long-row split, gradcheck and gradgradcheck, bitwise
repeatable backward, and errors (the gradients against float64 autograd:
test_spmm.py's value-gradient test, per head too)."""

from __future__ import annotations

import pytest
import torch

import torchplug
from op_table import TOLERANCE
from spmm_reference import spmm_reference
from torchplug._reductions import implemented

REDUCES = tuple(r.name for r in implemented(vars(torchplug), "spmm_{}"))
WIDTHS = (1, 3, 8, 16, 64, 200)


def graph(g: torch.Generator, N: int = 300):
    """(rowptr, col): rows of every length from 0 to 9, twice, and one of
    1,100 edges (past CUDA's split of rows longer than 1,024)."""
    degrees = torch.cat([torch.arange(10).repeat(2), torch.tensor([1100])])
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)])
    return rowptr, torch.randint(0, N, (int(rowptr[-1]),), generator=g)


def call(reduce: str, rowptr, col, value, x):
    result = getattr(torchplug, f"spmm_{reduce}")(rowptr, col, value, x)
    return result if isinstance(result, tuple) else (result,)


def head_cases(dtype: torch.dtype):
    """(H, C): every pair in float32 and float64, a few in 2-byte types."""
    if dtype in (torch.float32, torch.float64):
        return [(H, C) for H in range(1, 9) for C in WIDTHS]
    return [(1, 3), (4, 8), (8, 8), (3, 200), (8, 1)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
def test_heads_match_messages_reduced(reduce: str, dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(0)
    rowptr, col = graph(g)
    degrees = rowptr.diff().clamp(min=1).double().sqrt().view(-1, 1, 1)
    for H, C in head_cases(dtype):
        x = torch.randn(300, H, C, generator=g, dtype=torch.float64).to(dtype)
        value = torch.randn(col.numel(), H, generator=g, dtype=torch.float64).to(dtype)
        want, want_arg = spmm_reference(rowptr, col, value, x, reduce)
        got = call(reduce, rowptr.to(device), col.to(device), value.to(device), x.to(device))
        assert got[0].dtype == dtype and got[0].shape == (rowptr.numel() - 1, H, C), f"H={H} C={C}"
        # A float accumulator's rounding over a row of d terms walks about sqrt(d) steps.
        rtol, atol = TOLERANCE[dtype]
        excess = (got[0].double().cpu() - want).abs() - (rtol * want.abs() + atol * degrees)
        assert (excess <= 0).all(), f"H={H} C={C}: {excess.max():.3g} past the tolerance"
        if want_arg is not None and dtype == torch.float64:
            assert torch.equal(got[1].cpu(), want_arg), f"H={H} C={C}"


@pytest.mark.parametrize("reduce", REDUCES)
def test_one_head_is_the_scalar_weight(reduce: str, device: str) -> None:
    """value [nnz, 1] over x [N, 1, C] gives the bits of value [nnz] over x [N, C]."""
    g = torch.Generator().manual_seed(1)
    rowptr, col = (t.to(device) for t in graph(g))
    x = torch.randn(300, 16, generator=g).to(device)
    value = torch.randn(col.numel(), generator=g).to(device)
    scalar = call(reduce, rowptr, col, value, x)
    headed = call(reduce, rowptr, col, value.unsqueeze(1), x.unsqueeze(1))
    for a, b in zip(scalar, headed):
        assert torch.equal(a, b.squeeze(1))


@pytest.mark.parametrize("reduce", REDUCES)
def test_heads_gradcheck_and_gradgradcheck(reduce: str, device: str) -> None:
    g = torch.Generator().manual_seed(3)
    degrees = torch.tensor([0, 1, 3, 5, 2])
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)]).to(device)
    col = torch.randint(0, 6, (int(degrees.sum()),), generator=g).to(device)
    for H in (1, 3):
        x = torch.randn(6, H, 2, generator=g, dtype=torch.float64).to(device).requires_grad_()
        value = torch.randn(col.numel(), H, generator=g, dtype=torch.float64).to(device).requires_grad_()
        fn = lambda v, x: call(reduce, rowptr, col, v, x)[0]  # noqa: E731
        assert torch.autograd.gradcheck(fn, (value, x))
        if reduce in ("sum", "mean"):
            assert torch.autograd.gradgradcheck(fn, (value, x))


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_sddmm_per_head(mean: bool, dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(4)
    rowptr, col = graph(g)
    M = rowptr.numel() - 1
    row = torch.repeat_interleave(rowptr.diff(), output_size=col.numel())
    for H, C in [(1, 3), (2, 1), (4, 16), (8, 8), (3, 200)]:
        a = torch.randn(M, H, C, generator=g, dtype=torch.float64).to(dtype)
        b = torch.randn(300, H, C, generator=g, dtype=torch.float64).to(dtype)
        want = (a.double()[row] * b.double()[col]).sum(-1)
        if mean:
            want = want / rowptr.diff().double()[row].unsqueeze(-1)
        got = torchplug.sddmm(rowptr.to(device), col.to(device), a.to(device), b.to(device), mean, heads=H)
        want = want if H > 1 else want.squeeze(1)
        assert got.dtype == dtype and got.shape == want.shape, f"H={H} C={C}"
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(got.double().cpu(), want, rtol=rtol, atol=atol,
                                   msg=lambda m: f"H={H} C={C}\n{m}")


def test_sddmm_per_head_gradcheck_and_gradgradcheck(device: str) -> None:
    g = torch.Generator().manual_seed(5)
    degrees = torch.tensor([2, 0, 4, 1])
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)]).to(device)
    col = torch.randint(0, 5, (int(degrees.sum()),), generator=g).to(device)
    a = torch.randn(4, 3, 2, generator=g, dtype=torch.float64).to(device).requires_grad_()
    b = torch.randn(5, 3, 2, generator=g, dtype=torch.float64).to(device).requires_grad_()
    for mean in (False, True):
        fn = lambda a, b: torchplug.sddmm(rowptr, col, a, b, mean, heads=3)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (a, b))
        assert torch.autograd.gradgradcheck(fn, (a, b))


def test_heads_backward_repeats_bit_for_bit(device: str) -> None:
    g = torch.Generator().manual_seed(6)
    rowptr, col = (t.to(device) for t in graph(g))
    x = torch.randn(300, 8, 8, generator=g).to(device).requires_grad_()
    value = torch.randn(col.numel(), 8, generator=g).to(device).requires_grad_()
    grad = torch.randn(rowptr.numel() - 1, 8, 8, generator=g).to(device)
    for reduce in ("sum", "mean"):
        runs = [torch.autograd.grad(call(reduce, rowptr, col, value, x)[0], (x, value), grad) for _ in range(2)]
        assert all(torch.equal(a, b) for a, b in zip(*runs)), reduce


def test_heads_errors_name_op_and_argument() -> None:
    rowptr, col = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1])
    with pytest.raises(RuntimeError, match=r"spmm_sum: argument 'value' .* H = 3 heads: x of shape \[2, 4, 2\]"):
        torchplug.spmm_sum(rowptr, col, torch.ones(3, 3), torch.ones(2, 4, 2))
    with pytest.raises(RuntimeError, match=r"spmm_mean: argument 'value' .* must be \[nnz\] or \[nnz, H\]"):
        torchplug.spmm_mean(rowptr, col, torch.ones(3, 2, 1), torch.ones(2, 2, 1))
    with pytest.raises(RuntimeError, match=r"sddmm: argument 'a' of shape \[2, 4, 2\] must be \[M, H, \*\] with H = "
                                           r"heads = 3"):
        torchplug.sddmm(rowptr, col, torch.ones(2, 4, 2), torch.ones(2, 4, 2), heads=3)
    with pytest.raises(RuntimeError, match=r"sddmm: argument 'heads' must be at least 1, got 0"):
        torchplug.sddmm(rowptr, col, torch.ones(2, 4, 2), torch.ones(2, 4, 2), heads=0)
