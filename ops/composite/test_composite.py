"""The composites (scatter_softmax, scatter_log_softmax, scatter_logsumexp,
scatter_std, softmax_csr) against plain PyTorch on each group's values
(torch.softmax, torch.log_softmax, torch.logsumexp, torch.std in float64),
on every device: shapes, dtypes, special values, gradients (gradcheck and
gradgradcheck, the fused backward against autograd of the reference), the
out= forms, errors, and the compiler stacks."""

from __future__ import annotations

import math
from typing import Callable

import pytest
import torch
from torch import Tensor

import torchplug
from op_table import (DET_E, DET_N, ROWS_BY_FOLDER, TOLERANCE, OpRow, Sample, assert_bitwise, cpu_threads,
                      det_index, deterministic_algorithms, rows_param)
from composite_rows import GroupCompositeRow, SoftmaxCsrRow  # after op_table, which imports every family's rows

inf = float("inf")
SOFTMAX_OPS = {"softmax": (torchplug.scatter_softmax, torch.softmax),
               "log_softmax": (torchplug.scatter_log_softmax, torch.log_softmax)}


def _groups(index: Tensor, src: Tensor, dim: int, n: int):
    """(group, mask) for each group: mask of src's shape, True where src's
    element belongs to the group (index broadcast to src along dim)."""
    full = index
    while full.dim() < src.dim():
        full = full.unsqueeze(-1)
    if index.dim() == 1:
        shape = [1] * src.dim()
        shape[dim] = -1
        full = index.view(shape)
    full = full.expand(src.shape)
    return [(row, full == row) for row in range(n)]


def per_source(src: Tensor, index: Tensor, dim: int, n: int, fn: Callable, fill: float = 0.0) -> Tensor:
    """fn (a function of a 1-D group) applied to each group's values along dim,
    column by column, in float64; `fill` where a source belongs to no group."""
    dim %= src.dim()
    columns = math.prod(size for d, size in enumerate(src.shape) if d != dim)
    src64 = src.double().movedim(dim, -1).reshape(columns, src.size(dim)).cpu()
    full = _broadcast(index, src, dim).movedim(dim, -1).reshape(columns, src.size(dim)).cpu()
    out = torch.full_like(src64, fill)
    for column in range(src64.size(0)):
        for row in range(n):
            members = full[column] == row
            if members.any():
                out[column, members] = fn(src64[column, members])
    shape = list(src.shape)
    moved = shape[:dim] + shape[dim + 1:] + [shape[dim]]
    return out.view(moved).movedim(-1, dim)


def per_row(src: Tensor, index: Tensor, dim: int, n: int, fn: Callable, empty: float) -> Tensor:
    """fn (a function of a 1-D group giving a scalar) for each group and
    column, in float64: [*, n, *]."""
    dim %= src.dim()
    columns = math.prod(size for d, size in enumerate(src.shape) if d != dim)
    src64 = src.double().movedim(dim, -1).reshape(columns, src.size(dim)).cpu()
    full = _broadcast(index, src, dim).movedim(dim, -1).reshape(columns, src.size(dim)).cpu()
    out = torch.full((src64.size(0), n), empty, dtype=torch.float64)
    for column in range(src64.size(0)):
        for row in range(n):
            members = full[column] == row
            if members.any():
                out[column, row] = fn(src64[column, members])
    shape = list(src.shape)
    moved = shape[:dim] + shape[dim + 1:] + [n]
    return out.view(moved).movedim(-1, dim)


def _broadcast(index: Tensor, src: Tensor, dim: int) -> Tensor:
    if index.dim() == 1:
        shape = [1] * src.dim()
        shape[dim] = -1
        return index.view(shape).expand(src.shape)
    full = index
    while full.dim() < src.dim():
        full = full.unsqueeze(-1)
    return full.expand(src.shape)


def _std(unbiased: bool) -> Callable:
    return lambda g: g.std(unbiased=unbiased) if g.numel() > 1 or not unbiased else torch.tensor(0.0,
                                                                                               dtype=g.dtype)


def cases(device: str, dtype: torch.dtype, g: torch.Generator):
    """(src, index, dim, n, desc): the shape classes."""
    def v(shape):
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device)

    def i(shape, n):
        return torch.randint(0, n, shape, generator=g).to(device)

    long_index = torch.cat([torch.zeros(1500, dtype=torch.long), torch.randint(1, 4, (500,), generator=g)])
    return [
        (v((37,)), i((37,), 9), 0, 10, "1-D, an empty group"),
        (v((50, 8)), i((50,), 11), 0, 11, "2-D"),
        (v((3, 40, 5)), i((40,), 6), -2, 6, "3-D negative dim"),
        (v((7, 50)), i((50,), 11), -1, 12, "dim -1"),
        (v((4, 30)), i((4, 30), 8), 1, 8, "full index"),
        (v((4, 30, 3)), i((4, 30), 8), 1, 8, "broadcast index [B, E]"),
        (v((7, 50)).t(), i((50,), 11), 0, 11, "non-contiguous"),
        (v((2000, 4)), long_index[torch.randperm(2000, generator=g)].to(device), 0, 4, "a group of 1500, unsorted"),
        (v((2000, 4)), long_index.sort().values.to(device), 0, 4, "a group of 1500, sorted"),
        (v((0, 3)), i((0,), 4), 0, 4, "empty src"),
    ]


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SOFTMAX_OPS))
def test_softmax_matches_each_groups(name: str, dtype: torch.dtype, device: str, assert_same_result) -> None:
    ours, theirs = SOFTMAX_OPS[name]
    g = torch.Generator().manual_seed(0)
    for src, index, dim, n, desc in cases(device, dtype, g):
        got = ours(src, index, dim, n)
        want = per_source(src, index, dim, n, lambda t: theirs(t, 0))
        assert got.dtype == dtype and got.shape == src.shape and got.device == src.device, desc
        torch.testing.assert_close(got.double().cpu(), want, rtol=TOLERANCE[dtype][0], atol=TOLERANCE[dtype][1],
                                   msg=lambda m: f"{desc}: {m}")
        assert_same_result(ours(src, index, dim), got)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_logsumexp_and_std_match_each_groups(dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(1)
    rtol, atol = TOLERANCE[dtype]
    for src, index, dim, n, desc in cases(device, dtype, g):
        got = torchplug.scatter_logsumexp(src, index, dim, dim_size=n)
        want = per_row(src, index, dim, n, lambda t: t.logsumexp(0), 0.0)
        torch.testing.assert_close(got.double().cpu(), want, rtol=rtol, atol=atol, msg=lambda m: f"{desc}: {m}")
        for unbiased in (True, False):
            got = torchplug.scatter_std(src, index, dim, dim_size=n, unbiased=unbiased)
            want = per_row(src, index, dim, n, _std(unbiased), 0.0)
            torch.testing.assert_close(got.double().cpu(), want, rtol=rtol, atol=atol,
                                       msg=lambda m: f"{desc} unbiased={unbiased}: {m}")


def test_softmax_csr_matches_each_segment(device: str) -> None:
    torch.manual_seed(0)
    lengths = torch.tensor([3, 0, 1500, 7, 1, 0, 20])
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(device)
    index = torch.repeat_interleave(torch.arange(len(lengths)), lengths).to(device)
    for shape, dim in (((int(lengths.sum()), 4), 0), ((3, int(lengths.sum())), 1), ((2, int(lengths.sum()), 2), -2)):
        src = torch.randn(shape, dtype=torch.float64, device=device)
        want = per_source(src, index, dim, len(lengths), lambda t: t.softmax(0))
        torch.testing.assert_close(torchplug.softmax_csr(src, indptr, dim).cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_special_values(dtype: torch.dtype, device: str) -> None:
    """-inf groups give 0 (log: -inf), never NaN; exp(-1000) underflows to an
    exact 0 that stays 0; a NaN or a +inf poisons its group alone, as in torch.softmax."""
    inf, nan = float("inf"), float("nan")
    src = torch.tensor([-inf, -inf, 0.0, -1000.0, 1.0, nan, 2.0, inf, 3.0, 5.0], dtype=dtype, device=device)
    index = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4, 5], device=device)
    n = 7  # group 6 empty
    for name, (ours, theirs) in SOFTMAX_OPS.items():
        got = ours(src, index, 0, n).cpu()
        want = per_source(src, index, 0, n, lambda t: theirs(t, 0)).to(dtype)
        want[:2] = 0.0 if name == "softmax" else -inf  # torch gives NaN for an all -inf row
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{name}: {m}")
    assert torchplug.scatter_softmax(src, index, 0, n)[3].item() == 0.0
    lse = torchplug.scatter_logsumexp(src, index, 0, dim_size=n).cpu()
    torch.testing.assert_close(lse, torch.tensor([0.0, 0.0, nan, inf, 3.0, 5.0, 0.0], dtype=dtype), equal_nan=True)
    std = torchplug.scatter_std(src, index, 0, dim_size=n).cpu()
    assert std[0].isnan() and std[1].item() == pytest.approx(1000.0 / 2 ** 0.5) and std[2].isnan()
    assert std[3].isnan() and std[4].item() == 0.0 and std[6].item() == 0.0


def test_std_is_stable_far_from_zero(device: str) -> None:
    """float32 values of spread 1 about 1000: the sum of squares minus the
    square of the sum cancels six of float32's seven digits (a few percent
    off); Welford's update keeps the spread to about 1e-4."""
    torch.manual_seed(0)
    src = (torch.randn(4000, 3, dtype=torch.float64) + 1e3).float()
    index = torch.randint(0, 10, (4000,))
    got = torchplug.scatter_std(src.to(device), index.to(device), 0, dim_size=10).double().cpu()
    want = per_row(src, index, 0, 10, _std(True), 0.0)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=0)


def test_logsumexp_into_out(device: str) -> None:
    torch.manual_seed(0)
    src = torch.randn(30, 4, dtype=torch.float64, device=device)
    index = torch.randint(0, 5, (30,), device=device)
    out = torch.randn(6, 4, dtype=torch.float64, device=device)  # row 5 empty
    before = out.clone()
    result = torchplug.scatter_logsumexp(src, index, 0, out=out)
    assert result is out
    groups = torchplug.scatter_logsumexp(src, index, 0, dim_size=6)
    want = torch.stack([groups, before]).logsumexp(0)
    want[5] = before[5]
    torch.testing.assert_close(out, want)


def test_std_into_out(device: str) -> None:
    src = torch.randn(30, 4, dtype=torch.float64, device=device)
    index = torch.randint(0, 5, (30,), device=device)
    out = torch.full((5, 4), 7.0, dtype=torch.float64, device=device)
    assert torchplug.scatter_std(src, index, 0, out=out) is out
    torch.testing.assert_close(out, torchplug.scatter_std(src, index, 0, dim_size=5))


GRAD_OPS = {
    "softmax": lambda s, i, d, n: torchplug.scatter_softmax(s, i, d, n),
    "log_softmax": lambda s, i, d, n: torchplug.scatter_log_softmax(s, i, d, n),
    "logsumexp": lambda s, i, d, n: torchplug.scatter_logsumexp(s, i, d, dim_size=n),
    "std": lambda s, i, d, n: torchplug.scatter_std(s, i, d, dim_size=n),
    "std biased": lambda s, i, d, n: torchplug.scatter_std(s, i, d, dim_size=n, unbiased=False),
}


@pytest.mark.parametrize("name", list(GRAD_OPS))
def test_gradcheck_and_gradgradcheck(name: str, device: str) -> None:
    g = torch.Generator().manual_seed(2)
    fn = GRAD_OPS[name]
    for shape, index_shape, dim in (((12, 3), (12,), 0), ((3, 12), (3, 12), 1), ((2, 10, 2), (2, 10), 1)):
        src = torch.randn(shape, generator=g, dtype=torch.float64).to(device).requires_grad_()
        index = torch.randint(0, 4, index_shape, generator=g).to(device)
        # CUDA sums each row's terms in the order the counting sort left them.
        tol = 0.0 if device == "cpu" else 1e-12
        torch.autograd.gradcheck(lambda s: fn(s, index, dim, 5), (src,), nondet_tol=tol)
        torch.autograd.gradgradcheck(lambda s: fn(s, index, dim, 5), (src,), nondet_tol=tol)


def test_softmax_csr_gradients(device: str) -> None:
    src = torch.randn(12, 3, dtype=torch.float64, device=device, requires_grad=True)
    indptr = torch.tensor([0, 4, 4, 9, 12], device=device)
    torch.autograd.gradcheck(lambda s: torchplug.softmax_csr(s, indptr), (src,))
    torch.autograd.gradgradcheck(lambda s: torchplug.softmax_csr(s, indptr), (src,))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SOFTMAX_OPS))
def test_fused_backward_matches_autograd_of_reference(name: str, dtype: torch.dtype, device: str) -> None:
    ours, theirs = SOFTMAX_OPS[name]
    g = torch.Generator().manual_seed(3)
    for src, index, dim, n, desc in cases(device, dtype, g):
        if src.numel() == 0:
            continue
        x = src.detach().requires_grad_()
        grad = torch.randn(src.shape, generator=g, dtype=torch.float64).to(dtype).to(device)
        ours(x, index, dim, n).backward(grad)
        y = src.detach().double().cpu().requires_grad_()
        (per_source(y, index.cpu(), dim, n, lambda t: theirs(t, 0)) * grad.double().cpu()).sum().backward()
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(x.grad.double().cpu(), y.grad, rtol=rtol * 4, atol=atol * 4,
                                   msg=lambda m: f"{desc}: {m}")


def test_into_out_is_not_differentiable() -> None:
    src = torch.randn(6, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="torchplug::scatter_logsumexp_: the out= form does not support"):
        torchplug.scatter_logsumexp(src, torch.tensor([0, 1, 0, 1, 2, 2]), 0, out=torch.zeros(3, 2))


def test_errors_name_op_and_argument() -> None:
    src = torch.randn(6, 2)
    index = torch.tensor([0, 1, 0, 1, 2, 2])
    with pytest.raises(RuntimeError, match="torchplug::scatter_softmax: argument 'src'"):
        torchplug.scatter_softmax(src.long(), index, 0)
    with pytest.raises(IndexError, match="torchplug::scatter_std: .*index"):
        torchplug.scatter_std(src, index, 0, dim_size=2)
    with pytest.raises(IndexError, match="torchplug::softmax_csr: argument 'indptr' must end at src.size"):
        torchplug.softmax_csr(src, torch.tensor([0, 2, 5]))
    with pytest.raises(IndexError, match="torchplug::softmax_csr: argument 'indptr' must not decrease"):
        torchplug.softmax_csr(src, torch.tensor([0, 4, 2, 6]))
    with pytest.raises(RuntimeError, match="torchplug::scatter_log_softmax: .*index"):
        torchplug.scatter_log_softmax(src, index.float(), 0)


@pytest.mark.parametrize("op, args", [
    ("scatter_softmax", lambda s, i: (s, i, 0, 4)),
    ("scatter_log_softmax", lambda s, i: (s, i, 0, None)),
    ("scatter_logsumexp", lambda s, i: (s, i, 0, 4)),
    ("scatter_std", lambda s, i: (s, i, 0, 4, False)),
    ("softmax_csr", lambda s, i: (s, torch.tensor([0, 3, 3, 8, 10], device=s.device), 0)),
    ("scatter_softmax_backward", lambda s, i: (s.detach(), s.detach().softmax(0), i, 0, 4, False)),
])
def test_opcheck(op: str, args: Callable, device: str) -> None:
    src = torch.randn(10, 3, dtype=torch.float64, device=device, requires_grad=op != "scatter_softmax_backward")
    index = torch.tensor([0, 1, 0, 3, 1, 1, 3, 0, 2, 2], device=device)
    torch.library.opcheck(getattr(torch.ops.torchplug, op).default, args(src, index))


def test_compile_and_script(device: str) -> None:
    src = torch.randn(20, 4, device=device)
    index = torch.randint(0, 5, (20,), device=device)

    def layer(s: Tensor, i: Tensor) -> Tensor:
        return torchplug.scatter_softmax(s, i, 0, 5) * torchplug.scatter_std(s, i, 0, dim_size=5).sum()

    want = layer(src, index)
    torch.testing.assert_close(torch.compile(layer, fullgraph=True)(src, index), want)
    scripted = torch.jit.script(torchplug.composite.scatter_logsumexp)
    torch.testing.assert_close(scripted(src, index, 0, None, 5), torchplug.scatter_logsumexp(src, index, 0, dim_size=5))


@pytest.mark.parametrize("name", list(SOFTMAX_OPS))
def test_deterministic_mode_repeats_bitwise(name: str, device: str) -> None:
    ours, _ = SOFTMAX_OPS[name]
    torch.manual_seed(0)
    src = torch.randn(5000, 8, device=device)
    index = torch.cat([torch.zeros(2000, dtype=torch.long), torch.randint(0, 300, (3000,))])
    index = index[torch.randperm(5000)].to(device)
    try:
        torch.use_deterministic_algorithms(True)
        first = ours(src, index, 0, 300)
        assert torch.equal(ours(src, index, 0, 300), first)
        assert torch.equal(torchplug.scatter_std(src, index, 0, dim_size=300),
                           torchplug.scatter_std(src, index, 0, dim_size=300))
    finally:
        torch.use_deterministic_algorithms(False)


def test_registry_lists_the_composites() -> None:
    ops = {op.name: op for op in torchplug.registry()}
    for name in ("scatter_softmax", "scatter_log_softmax", "scatter_logsumexp", "scatter_std", "softmax_csr"):
        assert ops[name].plugin == "composite" and ops[name].differentiable, name
        assert {"CPU", "Meta"} <= set(ops[name].backends), name
        if torchplug.with_cuda:
            assert "CUDA" in ops[name].backends, name
    assert not ops["scatter_softmax_backward"].differentiable


def test_large_groups_stay_accurate(device: str) -> None:
    """2^21 values in one group: softmax still sums to 1 and logsumexp and std
    match float64 (a sequential float32 pass would drift by about 1e-4)."""
    torch.manual_seed(0)
    src = torch.rand(1 << 21, dtype=torch.float64).mul_(-4)
    index = torch.zeros(src.numel(), dtype=torch.long)
    x, i = src.float().to(device), index.to(device)
    assert abs(torchplug.scatter_softmax(x, i, 0, 1).double().sum().item() - 1) < 1e-5
    want = src.float().double()
    torch.testing.assert_close(torchplug.scatter_logsumexp(x, i, 0, dim_size=1).double().cpu(),
                               want.logsumexp(0, keepdim=True), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(torchplug.scatter_std(x, i, 0, dim_size=1).double().cpu(),
                               want.std().view(1), rtol=1e-5, atol=1e-6)


def test_std_out_is_checked() -> None:
    src, index = torch.randn(6, 2), torch.tensor([0, 1, 0, 1, 2, 2])
    with pytest.raises(RuntimeError, match="torchplug::scatter_std: argument 'out' of shape"):
        torchplug.scatter_std(src, index, 0, out=torch.zeros(3, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="torchplug::scatter_std: argument 'out' has 3 dimensions"):
        torchplug.scatter_std(src, index, 0, out=torch.zeros(3, 2, 1))


def test_values_outside_every_group_on_cuda(cuda_device: str) -> None:
    """Outside checked mode a CUDA source whose index names no group is in
    none: softmax 0, log_softmax -inf, no share in logsumexp or std, a zero gradient."""
    torch.manual_seed(0)
    src = torch.randn(40, 3, dtype=torch.float64, device=cuda_device)
    index = torch.randint(0, 5, (40,), device=cuda_device)
    bad = torch.zeros(40, dtype=torch.bool, device=cuda_device)
    bad[::7] = True
    index = torch.where(bad, torch.where(torch.arange(40, device=cuda_device) % 2 == 0, -1, 9), index)
    kept_src, kept_index = src[~bad], index[~bad]
    with torchplug.checked(False):
        soft = torchplug.scatter_softmax(src, index, 0, 5)
        assert bool((soft[bad] == 0).all()) and bool((torchplug.scatter_log_softmax(src, index, 0, 5)[bad] == -inf).all())
        torch.testing.assert_close(soft[~bad], torchplug.scatter_softmax(kept_src, kept_index, 0, 5))
        torch.testing.assert_close(torchplug.scatter_logsumexp(src, index, 0, dim_size=5),
                                   torchplug.scatter_logsumexp(kept_src, kept_index, 0, dim_size=5))
        torch.testing.assert_close(torchplug.scatter_std(src, index, 0, dim_size=5),
                                   torchplug.scatter_std(kept_src, kept_index, 0, dim_size=5))
        leaf = src.clone().requires_grad_()
        torchplug.scatter_log_softmax(leaf, index, 0, 5).mul(torch.randn_like(src)).sum().backward()
        assert bool((leaf.grad[bad] == 0).all())


# --------------------------------------------------------------------------- deterministic mode

def _indptr(index: Tensor, n: int) -> Tensor:
    """The indptr [n + 1] of a sorted index into n groups."""
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(index, minlength=n).cumsum(0)])


@pytest.mark.parametrize("kind", ["random", "power-law"])
@pytest.mark.parametrize("F", [1, 16, 64])
@pytest.mark.parametrize("row", rows_param(ROWS_BY_FOLDER["composite"]))
def test_deterministic_mode_repeats_bitwise_at_every_width(row: OpRow, F: int, kind: str, device: str) -> None:
    """Under torch.use_deterministic_algorithms(True) two calls on the same
    float32 inputs give the same bits, forward and src's gradient, for every
    composite at F = 1, 16 and 64, over a random index and a power-law one
    with a group of thousands (softmax_csr: the segments of the sorted
    index); the first run also against the float64 reference
    (composite_reference and its autograd). Values lie on a grid of 2^-8:
    a group of two values closer than that would leave std in float32 with
    a rounding of about eps |x| / std, whichever order a device adds in
    (4.5e-5 relative for a pair 8e-5 apart on the H100), and its gradient
    divides by std."""
    g = torch.Generator().manual_seed(300 + F)
    src = (torch.randn(DET_E, F, generator=g) * 256).round().div(256).to(device)
    index = det_index(kind, DET_E, DET_N, g)
    if isinstance(row, SoftmaxCsrRow):
        sample = Sample((src, _indptr(index.sort().values, DET_N).to(device)), 0, desc=kind)
    else:
        sample = Sample((src, index.to(device)), 0, DET_N, desc=kind)
    grad = torch.randn((DET_N if isinstance(row, GroupCompositeRow) else DET_E, F), generator=g).to(device)

    def forward_backward() -> tuple[Tensor, Tensor]:
        leaf = src.detach().clone().requires_grad_()
        result = row.call_with((leaf,), sample)[0]
        return result.detach(), torch.autograd.grad(result, (leaf,), grad)[0]

    with deterministic_algorithms():
        runs = [forward_backward() for _ in range(2)]
    context = f"{row.name} {kind} F={F}"
    for first, second in zip(*runs):
        assert_bitwise(second, first, f"{context}: runs differ")
    row.check(runs[0][:1], sample, "deterministic mode")
    rtol, atol = TOLERANCE[torch.float32]
    torch.testing.assert_close(runs[0][1].double().cpu(), row.grad_reference(sample, grad)[0].cpu(), rtol=rtol,
                               atol=atol, msg=lambda m: f"{context}: src gradient\n{m}")


# --------------------------------------------------------------------------- -inf first in a group

#: Below it a CPU pass runs on one thread (kSerialElements in composite_cpu.cpp).
CPU_SERIAL_ELEMENTS = 1 << 15


def minus_inf_first(E: int, n: int, dtype: torch.dtype, g: torch.Generator, csr: bool) -> tuple[Tensor, Tensor]:
    """(src [E, 3], index [E]) over n groups of at least 3 sources each
    (sorted with `csr`, else in random order): in every third group the
    first source in source order is -inf in all three columns, the rest
    finite; in every sixth also its second in column 1 (two leading -inf),
    and its last in column 2 (one more further on)."""
    index = torch.cat([torch.arange(n).repeat(3), torch.randint(0, n, (E - 3 * n,), generator=g)])
    index = index.sort().values if csr else index[torch.randperm(E, generator=g)]
    src = torch.randn(E, 3, generator=g, dtype=torch.float64)
    for group in range(0, n, 3):
        members = (index == group).nonzero().view(-1)
        src[members[0]] = -inf
        if group % 6 == 0:
            src[members[1], 1] = -inf
            src[members[-1], 2] = -inf
    return src.to(dtype), index


MINUS_INF_OPS = {
    "softmax": (lambda s, i, n: torchplug.scatter_softmax(s, i, 0, n), lambda t: t.softmax(0), True),
    "log_softmax": (lambda s, i, n: torchplug.scatter_log_softmax(s, i, 0, n), lambda t: t.log_softmax(0), True),
    "logsumexp": (lambda s, i, n: torchplug.scatter_logsumexp(s, i, 0, dim_size=n), lambda t: t.logsumexp(0),
                  False),
    "softmax_csr": (lambda s, indptr, n: torchplug.softmax_csr(s, indptr, 0), lambda t: t.softmax(0), True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("E, threads", [
    pytest.param(40, 1, id="serial size"),
    pytest.param(20_000, 1, id="parallel size, one thread"),
    pytest.param(20_000, 2, id="parallel size, two threads"),
])
@pytest.mark.parametrize("name", list(MINUS_INF_OPS))
def test_group_whose_first_value_is_minus_inf(name: str, E: int, threads: int, dtype: torch.dtype,
                                              device: str) -> None:
    """A group whose first value in source order is -inf and which holds
    finite values too: the -inf gets 0 (log_softmax: -inf) and no share of
    the sum, the others the softmax of the finite values, and its logsumexp
    theirs, as torch.softmax, torch.log_softmax and torch.logsumexp give on
    each group in float64; the gradient as their autograd's (0 at the -inf
    but for log_softmax, whose is the incoming gradient). Below the size
    where the CPU passes go parallel and above it, on one thread and on two
    (each owning a range of the groups)."""
    if device == "cuda" and threads > 1:
        pytest.skip("the thread count is the CPU's: one thread's case covers CUDA")
    assert (E * 3 < CPU_SERIAL_ELEMENTS) == (E == 40)
    ours, theirs, per_value = MINUS_INF_OPS[name]
    g = torch.Generator().manual_seed(7)
    n = max(4, E // 50)
    src, index = minus_inf_first(E, n, dtype, g, csr=name == "softmax_csr")
    positions = _indptr(index, n) if name == "softmax_csr" else index
    grad = torch.randn((E if per_value else n, 3), generator=g, dtype=torch.float64)
    leaf = src.to(device).requires_grad_()
    with cpu_threads(threads):
        got = ours(leaf, positions.to(device), n)
        (got_grad,) = torch.autograd.grad(got, (leaf,), grad.to(dtype).to(device))
    ref_leaf = src.double().requires_grad_()
    if per_value:
        want = per_source(ref_leaf, index, 0, n, theirs)
    else:
        want = per_row(ref_leaf, index, 0, n, theirs, 0.0)
    (want_grad,) = torch.autograd.grad(want, (ref_leaf,), grad.to(dtype).double())
    assert got.dtype == dtype and got.shape == want.shape and got.device == leaf.device
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(got.detach().double().cpu(), want.detach(), rtol=rtol, atol=atol,
                               msg=lambda m: f"{name}: {m}")
    torch.testing.assert_close(got_grad.double().cpu(), want_grad, rtol=rtol, atol=atol,
                               msg=lambda m: f"{name}: src gradient\n{m}")

