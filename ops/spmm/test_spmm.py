"""spmm_sum, spmm_mean, spmm_min and spmm_max against plain PyTorch on the
same inputs (the E x F messages value[k] * x[col[k]] reduced by
scatter_reduce, the sum also as a dense matmul), on every device: shapes,
dtypes, empty rows and graphs, a hub row past CUDA's long-row limit, the
sparse CSR front door, gradients (gradcheck, gradgradcheck, the transposed
sum's repeatable bits), errors, and the compiler stacks."""

from __future__ import annotations

from typing import Optional

import pytest
import torch
from torch import Tensor

import torchplug
from op_table import TOLERANCE, assert_bitwise, deterministic_algorithms
from spmm_reference import spmm_reference
from torchplug._reductions import implemented

REDUCES = tuple(r.name for r in implemented(vars(torchplug), "spmm_{}"))


def graph(M: int, N: int, nnz: int, g: torch.Generator, hub: int = 0):
    """(rowptr, col): nnz random edges over M rows (some empty), `hub` more in
    row 0 and hub / 2 more in the last row (rows past CUDA's long-row limit,
    one starting inside a chunk of edges)."""
    rows = torch.randint(0, M, (nnz,), generator=g) if M > 0 else torch.zeros(0, dtype=torch.long)
    hubs = [torch.zeros(hub, dtype=torch.long), torch.full((hub // 2,), max(M - 1, 0), dtype=torch.long)]
    rows = torch.cat(hubs + [rows]).sort().values
    col = torch.randint(0, N, (rows.numel(),), generator=g)
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows, minlength=M).cumsum(0)])
    return rowptr, col


def call(reduce: str, rowptr, col, value, x):
    result = getattr(torchplug, f"spmm_{reduce}")(rowptr, col, value, x)
    return result if isinstance(result, tuple) else (result,)


CASES = [  # (M, N, nnz, F shape, hub, weighted)
    (30, 20, 90, (5,), 0, True),
    (30, 20, 90, (8,), 0, False),
    (25, 40, 60, (), 0, True),
    (10, 7, 40, (3, 4), 0, True),
    (6, 2500, 50, (4,), 3000, True),
    (12, 9, 0, (4,), 0, True),
    (0, 5, 0, (3,), 0, False),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
def test_matches_messages_reduced(reduce: str, dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(0)
    for M, N, nnz, shape, hub, weighted in CASES:
        rowptr, col = graph(M, N, nnz, g, hub)
        x = torch.randn((N,) + shape, generator=g, dtype=torch.float64).to(dtype)
        value = torch.randn(col.numel(), generator=g, dtype=torch.float64).to(dtype) if weighted else None
        want, want_arg = spmm_reference(rowptr, col, value, x, reduce)
        got = call(reduce, rowptr.to(device), col.to(device), None if value is None else value.to(device),
                   x.to(device))
        context = f"M={M} N={N} nnz={col.numel()} x {tuple(x.shape)} weighted={weighted}"
        assert got[0].dtype == dtype and got[0].shape == want.shape and got[0].device.type == device, context
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(got[0].double().cpu(), want, rtol=rtol, atol=atol, msg=lambda m: f"{context}\n{m}")
        if want_arg is not None and dtype == torch.float64:
            assert torch.equal(got[1].cpu(), want_arg), context


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
def test_every_feature_width_and_row_length(reduce: str, dtype: torch.dtype, device: str) -> None:
    """F from 1 to 512 (every vector width, rows of up to 128 vectors) over rows
    of every length from 0 to 19 (each remainder of CUDA's batches of 4 and 8
    edges) and two hubs past its long-row limit."""
    g = torch.Generator().manual_seed(5)
    degrees = torch.cat([torch.arange(20).repeat(3), torch.tensor([3000, 1700])])
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)])
    N = 700
    col = torch.randint(0, N, (int(rowptr[-1]),), generator=g)
    value = torch.randn(col.numel(), generator=g, dtype=torch.float64).to(dtype)
    for F in (1, 2, 3, 8, 16, 64, 200, 512):
        x = torch.randn(N, F, generator=g, dtype=torch.float64).to(dtype)
        want, want_arg = spmm_reference(rowptr, col, value, x, reduce)
        got = call(reduce, rowptr.to(device), col.to(device), value.to(device), x.to(device))
        assert got[0].dtype == dtype and got[0].shape == want.shape, f"F={F}"
        # A float accumulator's rounding over a row of d terms walks about sqrt(d) steps.
        rtol, atol = TOLERANCE[dtype]
        allowed = rtol * want.abs() + atol * degrees.clamp(min=1).double().sqrt().view(-1, 1)
        excess = (got[0].double().cpu() - want).abs() - allowed
        worst = int(excess.max(1).values.argmax())
        assert (excess <= 0).all(), f"F={F}: row {worst} is {excess.max():.3g} past the tolerance"
        if want_arg is not None and dtype == torch.float64:
            assert torch.equal(got[1].cpu(), want_arg), f"F={F}"


def test_sum_is_the_matrix_product(device: str) -> None:
    torch.manual_seed(0)
    dense = (torch.rand(60, 50) < 0.1) * torch.randn(60, 50, dtype=torch.float64)
    adj = dense.to_sparse_csr().to(device)
    x = torch.randn(50, 7, dtype=torch.float64, device=device)
    torch.testing.assert_close(torchplug.spmm(adj, x), dense.to(device) @ x)
    rowptr, col, value = adj.crow_indices(), adj.col_indices(), adj.values()
    for reduce in REDUCES:
        want = call(reduce, rowptr, col, value, x)[0]
        torch.testing.assert_close(torchplug.spmm(adj, x, reduce), want, rtol=0, atol=0)
        torch.testing.assert_close(torchplug.spmm((rowptr, col, value), x, reduce), want, rtol=0, atol=0)


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck_and_gradgradcheck(reduce: str, device: str) -> None:
    g = torch.Generator().manual_seed(1)
    rowptr, col = graph(12, 9, 40, g)
    rowptr, col = rowptr.to(device), col.to(device)
    x = torch.randn(9, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    value = torch.randn(col.numel(), generator=g, dtype=torch.float64).to(device).requires_grad_()
    fn = lambda v, x: call(reduce, rowptr, col, v, x)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (value, x))
    assert torch.autograd.gradgradcheck(fn, (value, x))
    unweighted = lambda x: call(reduce, rowptr, col, None, x)[0]  # noqa: E731
    assert torch.autograd.gradcheck(unweighted, (x,))


def test_sum_gradient_repeats_bit_for_bit(device: str) -> None:
    """x's gradient is an spmm over the transpose (no atomics): the same bits every run."""
    g = torch.Generator().manual_seed(2)
    rowptr, col = graph(2000, 300, 40000, g, hub=5000)
    x = torch.randn(300, 16, generator=g).to(device).requires_grad_()
    value = torch.randn(col.numel(), generator=g).to(device).requires_grad_()
    grad = torch.randn(2000, 16, generator=g).to(device)
    rowptr, col = rowptr.to(device), col.to(device)
    first = torch.autograd.grad(torchplug.spmm_sum(rowptr, col, value, x), (x, value), grad)
    second = torch.autograd.grad(torchplug.spmm_sum(rowptr, col, value, x), (x, value), grad)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    dense = torch.zeros(2000, 300, device=device).index_put_(
        (torch.repeat_interleave(rowptr.diff()), col), value.detach(), accumulate=True)
    torch.testing.assert_close(first[0], dense.t() @ grad, rtol=1e-4, atol=1e-4)


def test_errors_name_op_and_argument() -> None:
    rowptr, col, x = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1]), torch.randn(2, 3)
    with pytest.raises(IndexError, match="torchplug::spmm_sum: argument 'col'"):
        torchplug.spmm_sum(rowptr, torch.tensor([0, 2, 1]), None, x)
    with pytest.raises(IndexError, match="torchplug::spmm_mean: argument 'rowptr' must end at nnz"):
        torchplug.spmm_mean(torch.tensor([0, 2, 2]), col, None, x)
    with pytest.raises(IndexError, match="torchplug::spmm_max: argument 'rowptr' must not decrease"):
        torchplug.spmm_max(torch.tensor([0, 3, 2, 3]), col, None, x)
    with pytest.raises(RuntimeError, match="torchplug::spmm_sum: argument 'value' must have x's dtype"):
        torchplug.spmm_sum(rowptr, col, torch.ones(3, dtype=torch.float64), x)
    with pytest.raises(RuntimeError, match="torchplug::spmm_sum: argument 'x'"):
        torchplug.spmm_sum(rowptr, col, None, x.long())
    with pytest.raises(ValueError, match="torchplug.spmm: argument 'reduce'"):
        torchplug.spmm((rowptr, col, None), x, "mul")
    with pytest.raises(TypeError, match="torchplug.spmm: argument 'adj' must be a sparse CSR tensor"):
        torchplug.spmm(torch.eye(2), x)


@pytest.mark.parametrize("reduce", REDUCES)
def test_opcheck(reduce: str, device: str) -> None:
    g = torch.Generator().manual_seed(3)
    rowptr, col = graph(8, 6, 20, g)
    x = torch.randn(6, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    value = torch.randn(col.numel(), generator=g, dtype=torch.float64).to(device).requires_grad_()
    op = getattr(torch.ops.torchplug, f"spmm_{reduce}").default
    torch.library.opcheck(op, (rowptr.to(device), col.to(device), value, x))
    torch.library.opcheck(op, (rowptr.to(device), col.to(device), None, x.detach()))


def test_compile_and_script(device: str) -> None:
    g = torch.Generator().manual_seed(4)
    rowptr, col = (t.to(device) for t in graph(20, 10, 60, g))
    x = torch.randn(10, 4, generator=g).to(device)

    def layer(x: Tensor) -> Tensor:
        return torchplug.spmm_mean(rowptr, col, None, x) + torchplug.spmm_max(rowptr, col, None, x)[0]

    torch.testing.assert_close(torch.compile(layer, fullgraph=True)(x), layer(x))
    scripted = torch.jit.script(torchplug.spmm_sum)
    torch.testing.assert_close(scripted(rowptr, col, None, x), torchplug.spmm_sum(rowptr, col, None, x))


def test_registry_lists_spmm() -> None:
    ops = {op.name: op for op in torchplug.registry()}
    for reduce in REDUCES:
        info = ops[f"spmm_{reduce}"]
        assert info.plugin == "spmm" and info.differentiable
        assert {"CPU", "Meta"} <= set(info.backends)
        if torchplug.with_cuda:
            assert "CUDA" in info.backends


def test_sparse_csr_shape_is_checked() -> None:
    adj = torch.eye(3).to_sparse_csr()
    with pytest.raises(ValueError, match="torchplug.spmm: argument 'adj' of shape"):
        torchplug.spmm(adj, torch.randn(4, 2))
    int32 = torch.sparse_csr_tensor(adj.crow_indices().int(), adj.col_indices().int(), adj.values(), (3, 3))
    torch.testing.assert_close(torchplug.spmm(int32, torch.ones(3, 2)), torch.ones(3, 2))


def test_mean_gradient_of_a_hub_in_half_precision() -> None:
    """A float16 degree of 70000 is inf: the gradient is taken in float32."""
    E = 70000
    rowptr, col = torch.tensor([0, E]), torch.zeros(E, dtype=torch.long)
    x = torch.ones(1, 2, dtype=torch.float16, requires_grad=True)
    value = torch.ones(E, dtype=torch.float16, requires_grad=True)
    torchplug.spmm_mean(rowptr, col, value, x).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(1, 2, dtype=torch.float16), rtol=2e-3, atol=0)
    torch.testing.assert_close(value.grad.float(), torch.full((E,), 2 / E), rtol=2e-3, atol=0)


def test_compile_traces_backward_once_for_every_graph_size() -> None:
    """Backward's sizes stay symbolic: three graph sizes, one compiled frame."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def step(rowptr: Tensor, col: Tensor, value: Tensor, x: Tensor) -> Tensor:
        return torchplug.spmm_sum(rowptr, col, value, x).sum()

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, backend=counter, dynamic=True)
    g = torch.Generator().manual_seed(5)
    for M, N, nnz in ((10, 8, 30), (12, 9, 50), (14, 11, 70)):
        rowptr, col = graph(M, N, nnz, g)
        x = torch.randn(N, 3, generator=g, requires_grad=True)
        value = torch.randn(col.numel(), generator=g, requires_grad=True)
        compiled(rowptr, col, value, x).backward()
        want = torch.autograd.grad(step(rowptr, col, value, x), (x, value))
        torch.testing.assert_close((x.grad, value.grad), want)
    torch._dynamo.reset()
    assert counter.frame_count == 1


# --------------------------------------------------------------- the transpose


def transpose_reference(rowptr: Tensor, col: Tensor, N: int):
    """(colptr, row, perm) from a stable argsort of col in plain PyTorch."""
    rowptr, col = rowptr.cpu(), col.cpu()
    row = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff(), output_size=col.numel())
    perm = torch.sort(col, stable=True).indices
    colptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(col, minlength=N).cumsum(0)])
    return colptr, row[perm], perm


@pytest.mark.parametrize("M, N, nnz, hub", [(30, 20, 90, 0), (6, 2500, 50, 3000), (12, 9, 0, 0), (0, 5, 0, 0),
                                            (200, 70000, 4000, 1500)])
def test_transpose_is_the_stable_sort_by_column(M: int, N: int, nnz: int, hub: int, device: str) -> None:
    g = torch.Generator().manual_seed(6)
    rowptr, col = graph(M, N, nnz, g, hub)
    got = torchplug.spmm_transpose(rowptr.to(device), col.to(device), N)
    for name, have, want in zip(("colptr", "row", "perm"), got, transpose_reference(rowptr, col, N)):
        assert have.dtype == torch.long and have.device.type == device, name
        assert torch.equal(have.cpu(), want), name
    # More columns than col names: the last ones are empty.
    colptr = torchplug.spmm_transpose(rowptr.to(device), col.to(device), N + 3)[0]
    want = torch.cat([transpose_reference(rowptr, col, N)[0], torch.full((3,), col.numel())])
    assert torch.equal(colptr.cpu(), want)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gradients_equal_with_and_without_the_cached_transpose(reduce: str, dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(7)
    rowptr, col = (t.to(device) for t in graph(400, 300, 6000, g, hub=2500))
    x = torch.randn(300, 8, generator=g, dtype=dtype).to(device).requires_grad_()
    value = torch.randn(col.numel(), generator=g, dtype=dtype).to(device).requires_grad_()
    grad = torch.randn(400, 8, generator=g, dtype=dtype).to(device)
    transpose = torchplug.spmm_transpose(rowptr, col, 300)
    fn = getattr(torchplug, f"spmm_{reduce}")

    def same(want: Tensor, have: Tensor) -> None:
        if reduce in ("min", "max") and device == "cuda":
            # Their gradients add into x and value with scatter_add and
            # index_add, atomics on CUDA: the same terms in another order.
            torch.testing.assert_close(have, want)
        else:
            assert torch.equal(want, have)

    for weights, inputs in ((value, (x, value)), (None, (x,))):
        plain = torch.autograd.grad(call(reduce, rowptr, col, weights, x)[0], inputs, grad)
        result = fn(rowptr, col, weights, x, transpose=transpose)
        cached = torch.autograd.grad(result if isinstance(result, Tensor) else result[0], inputs, grad)
        for want, have in zip(plain, cached):
            same(want, have)
        front = torch.autograd.grad(torchplug.spmm((rowptr, col, weights), x, reduce, transpose=transpose), inputs,
                                    grad)
        for want, have in zip(plain, front):
            same(want, have)


def test_backward_uses_the_cached_transpose_and_sddmm() -> None:
    """With a transpose given, backward builds none; value's gradient is
    sddmm, and no op of backward makes a tensor of E x F elements."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Calls(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []
            self.largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, Tensor):
                    self.largest = max(self.largest, t.numel())
            return out

    g = torch.Generator().manual_seed(8)
    M, N, F = 20, 15, 4
    rowptr, col = graph(M, N, 80, g)
    x = torch.randn(N, F, generator=g, requires_grad=True)
    value = torch.randn(col.numel(), generator=g, requires_grad=True)
    for reduce in ("sum", "mean"):
        for transpose in (None, torchplug.spmm_transpose(rowptr, col, N)):
            out = getattr(torchplug, f"spmm_{reduce}")(rowptr, col, value, x, transpose=transpose)
            with Calls() as calls:
                out.sum().backward()
            assert "torchplug.sddmm" in calls.names, calls.names
            assert ("torchplug.spmm_transpose" in calls.names) == (transpose is None), calls.names
            assert calls.largest < col.numel() * F, (calls.largest, calls.names)


def test_wrong_transpose_is_refused() -> None:
    g = torch.Generator().manual_seed(9)
    rowptr, col = graph(10, 7, 30, g)
    x = torch.randn(7, 3, generator=g)
    colptr, row, perm = torchplug.spmm_transpose(rowptr, col, 7)
    with pytest.raises(RuntimeError, match=r"torchplug::spmm_sum: argument 'colptr' of shape \[7\] must be \[N \+ 1\] "
                                           r"with N = x.size\(0\) = 7"):
        torchplug.spmm_sum(rowptr, col, None, x, transpose=(colptr[:-1], row, perm))
    with pytest.raises(RuntimeError, match=r"torchplug::spmm_mean: argument 'row' of shape \[29\] must be \[nnz\]"):
        torchplug.spmm_mean(rowptr, col, None, x, transpose=(colptr, row[1:], perm))
    with pytest.raises(RuntimeError, match=r"torchplug::spmm_max: argument 'perm' of shape \[30, 1\] must be \[nnz\]"):
        torchplug.spmm_max(rowptr, col, None, x, transpose=(colptr, row, perm.view(-1, 1)))
    with pytest.raises(RuntimeError, match="torchplug::spmm_sum: argument 'perm' must be an int64"):
        torchplug.spmm_sum(rowptr, col, None, x, transpose=(colptr, row, perm.int()))
    with pytest.raises(RuntimeError, match="torchplug::spmm_sum: arguments 'colptr', 'row' and 'perm'"):
        torch.ops.torchplug.spmm_sum(rowptr, col, None, x, colptr, row)
    with pytest.raises(IndexError, match="torchplug::spmm_sum: argument 'row'"):
        torchplug.spmm_sum(rowptr, col, None, x, transpose=(colptr, row + 10, perm))
    with pytest.raises(IndexError, match="torchplug::spmm_sum: argument 'colptr' must end at nnz"):
        torchplug.spmm_sum(rowptr, col, None, x, transpose=(colptr.clamp(max=29), row, perm))
    with pytest.raises(RuntimeError, match=r"torchplug::sddmm: argument 'colptr' of shape \[8\] must be \[N \+ 1\] "
                                           r"with N = b.size\(0\) = 6"):
        torchplug.sddmm(rowptr, col.clamp(max=5), torch.randn(10, 3), torch.randn(6, 3), transpose=(colptr, row, perm))
    with pytest.raises(IndexError, match="torchplug::spmm_transpose: argument 'col'"):
        torchplug.spmm_transpose(rowptr, col, 5)
    with pytest.raises(RuntimeError, match="torchplug::spmm_transpose: argument 'num_cols' must be at least 0"):
        torchplug.spmm_transpose(rowptr[:1], col[:0], -1)


# ----------------------------------------------------------------------- sddmm


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_sddmm_matches_per_edge_products(mean: bool, dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(10)
    cases = CASES + [(40, 30, 300, (64,), 0, True), (5, 30, 100, (256,), 2000, True), (9, 11, 50, (7, 3), 0, True)]
    for M, N, nnz, shape, hub, _ in cases:
        rowptr, col = graph(M, N, nnz, g, hub)
        a = torch.randn((M,) + shape, generator=g, dtype=torch.float64).to(dtype)
        b = torch.randn((N,) + shape, generator=g, dtype=torch.float64).to(dtype)
        row = torch.repeat_interleave(rowptr.diff(), output_size=col.numel())
        F = int(torch.tensor(shape, dtype=torch.long).prod())
        want = (a.double().reshape(M, F)[row] * b.double().reshape(N, F)[col]).sum(1)
        if mean:
            want = want / rowptr.diff().double()[row]
        got = torchplug.sddmm(rowptr.to(device), col.to(device), a.to(device), b.to(device), mean)
        context = f"M={M} N={N} nnz={col.numel()} a {tuple(a.shape)}"
        assert got.dtype == dtype and got.shape == (col.numel(),) and got.device.type == device, context
        rtol, atol = TOLERANCE[dtype]  # summed in float32 or float64, rounded once
        torch.testing.assert_close(got.double().cpu(), want, rtol=rtol, atol=atol, msg=lambda m: f"{context}\n{m}")


@pytest.mark.parametrize("heads", [0, 4], ids=["value [nnz]", "value [nnz, H]"])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_value_gradient_against_a_float64_reference(reduce: str, dtype: torch.dtype, heads: int,
                                                     device: str) -> None:
    """value's and x's gradients against autograd of the plain messages
    reduced in float64, on the same (rounded) inputs: a product of two
    float16 or bfloat16 values is exact in float32, so min and max pick the
    same edges (ties are unlikely with random values). With `heads`, a
    weight per head of x [N, H, C]."""
    g = torch.Generator().manual_seed(11)
    rowptr, col = graph(300, 200, 3000, g, hub=2000)
    shape = (heads, 16 // heads) if heads else (16,)
    x = torch.randn((200,) + shape, generator=g, dtype=torch.float64).to(dtype).double()
    value = torch.randn((col.numel(),) + shape[:1] if heads else (col.numel(),), generator=g,
                        dtype=torch.float64).to(dtype).double()
    grad = torch.randn((300,) + shape, generator=g, dtype=torch.float64).to(dtype).double()
    leaves = (x.clone().requires_grad_(), value.clone().requires_grad_())
    want = torch.autograd.grad(spmm_reference(rowptr, col, leaves[1], leaves[0], reduce)[0], leaves, grad)
    mine = (x.to(dtype).to(device).requires_grad_(), value.to(dtype).to(device).requires_grad_())
    got = torch.autograd.grad(call(reduce, rowptr.to(device), col.to(device), mine[1], mine[0])[0], mine,
                              grad.to(dtype).to(device))
    rtol, atol = TOLERANCE[dtype]
    for name, have, expected in zip(("x", "value"), got, want):
        assert have.dtype == dtype, name
        # Summed in float32 or float64 and rounded once.
        torch.testing.assert_close(have.double().cpu(), expected, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_sddmm_gradcheck_and_gradgradcheck(mean: bool, device: str) -> None:
    g = torch.Generator().manual_seed(12)
    rowptr, col = (t.to(device) for t in graph(12, 9, 40, g))
    a = torch.randn(12, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    b = torch.randn(9, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    transpose = torchplug.spmm_transpose(rowptr, col, 9)
    for t in (None, transpose):
        fn = lambda a, b: torchplug.sddmm(rowptr, col, a, b, mean, transpose=t)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (a, b))
        assert torch.autograd.gradgradcheck(fn, (a, b))


@pytest.mark.parametrize("reduce", ("sum", "mean"))
def test_gradcheck_with_the_cached_transpose(reduce: str, device: str) -> None:
    g = torch.Generator().manual_seed(13)
    rowptr, col = (t.to(device) for t in graph(12, 9, 40, g))
    x = torch.randn(9, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    value = torch.randn(col.numel(), generator=g, dtype=torch.float64).to(device).requires_grad_()
    transpose = torchplug.spmm_transpose(rowptr, col, 9)
    fn = lambda v, x: torchplug.spmm((rowptr, col, v), x, reduce, transpose=transpose)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (value, x))
    assert torch.autograd.gradgradcheck(fn, (value, x))


def test_opcheck_transpose_and_sddmm(device: str) -> None:
    g = torch.Generator().manual_seed(14)
    rowptr, col = (t.to(device) for t in graph(8, 6, 20, g))
    torch.library.opcheck(torch.ops.torchplug.spmm_transpose.default, (rowptr, col, 6))
    colptr, row, perm = torchplug.spmm_transpose(rowptr, col, 6)
    a = torch.randn(8, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    b = torch.randn(6, 3, generator=g, dtype=torch.float64).to(device).requires_grad_()
    for mean in (False, True):
        torch.library.opcheck(torch.ops.torchplug.sddmm.default, (rowptr, col, a, b, mean))
        torch.library.opcheck(torch.ops.torchplug.sddmm.default, (rowptr, col, a, b, mean, colptr, row, perm))
    value = torch.randn(col.numel(), generator=g, dtype=torch.float64).to(device).requires_grad_()
    for reduce in REDUCES:
        op = getattr(torch.ops.torchplug, f"spmm_{reduce}").default
        torch.library.opcheck(op, (rowptr, col, value, b, colptr, row, perm))


def test_compile_with_the_cached_transpose(device: str) -> None:
    g = torch.Generator().manual_seed(15)
    rowptr, col = (t.to(device) for t in graph(20, 10, 60, g))
    transpose = torchplug.spmm_transpose(rowptr, col, 10)
    x = torch.randn(10, 4, generator=g).to(device)
    value = torch.randn(col.numel(), generator=g).to(device)

    def step(x: Tensor, value: Tensor) -> Tensor:
        out = torchplug.spmm_mean(rowptr, col, value, x, transpose=transpose)
        t = torchplug.spmm_transpose(rowptr, col, x.size(0))
        return (out.sum() + torchplug.sddmm(rowptr, col, out, x, transpose=t).sum()
                + torchplug.spmm_sum(rowptr, col, None, x, transpose=t).sum())

    leaves = (x.clone().requires_grad_(), value.clone().requires_grad_())
    compiled = torch.compile(step, fullgraph=True)(*leaves)
    compiled_grads = torch.autograd.grad(compiled, leaves)
    leaves2 = (x.clone().requires_grad_(), value.clone().requires_grad_())
    eager = step(*leaves2)
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(compiled_grads, torch.autograd.grad(eager, leaves2))
    scripted = torch.jit.script(torchplug.spmm_mean)
    torch.testing.assert_close(scripted(rowptr, col, value, x, transpose), torchplug.spmm_mean(rowptr, col, value, x))
    torch.testing.assert_close(torch.jit.script(torchplug.sddmm)(rowptr, col, x[:0].new_ones(20, 4), x),
                               torchplug.sddmm(rowptr, col, x.new_ones(20, 4), x))


# --------------------------------------------------------------------------- deterministic mode


def power_law_graph(M: int, N: int, nnz: int, g: torch.Generator, hub: int):
    """(rowptr, col): nnz edges whose rows and columns are drawn with weight
    1 / (k + 1) (power-law degrees, labels shuffled), plus `hub` edges in one
    row and `hub` more in one column (a row of thousands for the forward
    and value's gradient, a column of thousands for x's gradient, which
    runs over the transpose)."""
    def draw(n: int, count: int) -> Tensor:
        weights = 1.0 / torch.arange(1, n + 1, dtype=torch.float64)
        return torch.randperm(n, generator=g)[torch.multinomial(weights, count, replacement=True, generator=g)]

    rows = torch.cat([draw(M, nnz), torch.full((hub,), int(torch.randint(0, M, (1,), generator=g))),
                      torch.randint(0, M, (hub,), generator=g)])
    cols = torch.cat([draw(N, nnz), torch.randint(0, N, (hub,), generator=g),
                      torch.full((hub,), int(torch.randint(0, N, (1,), generator=g)))])
    order = torch.randperm(rows.numel(), generator=g)
    rows, perm = rows[order].sort(stable=True)
    col = cols[order][perm]
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows, minlength=M).cumsum(0)])
    return rowptr, col


@pytest.mark.parametrize("kind", ["random", "power-law"])
@pytest.mark.parametrize("F", [1, 16, 64])
@pytest.mark.parametrize("reduce", REDUCES)
def test_deterministic_mode_backward_repeats_bitwise(reduce: str, F: int, kind: str, device: str) -> None:
    """Under torch.use_deterministic_algorithms(True) two forward and
    backward passes on the same float32 inputs give the same bits: the
    output (and arg), x's gradient and value's, at F = 1, 16 and 64, over a
    random graph and a power-law one with a row and a column of thousands of
    edges; the first run also against autograd of the float64 messages
    (spmm_reference)."""
    g = torch.Generator().manual_seed(400 + F)
    M, N, nnz = 500, 400, 8000
    rowptr, col = graph(M, N, nnz, g) if kind == "random" else power_law_graph(M, N, nnz - 6000, g, hub=3000)
    x = torch.randn(N, F, generator=g)
    value = torch.randn(col.numel(), generator=g)
    grad = torch.randn(M, F, generator=g)
    on = [t.to(device) for t in (rowptr, col, x, value, grad)]

    def forward_backward() -> tuple[Tensor, ...]:
        leaves = (on[2].clone().requires_grad_(), on[3].clone().requires_grad_())
        outputs = call(reduce, on[0], on[1], leaves[1], leaves[0])
        grads = torch.autograd.grad(outputs[0], leaves, on[4])
        return tuple(t.detach() for t in outputs) + grads

    with deterministic_algorithms():
        runs = [forward_backward() for _ in range(2)]
    context = f"spmm_{reduce} {kind} F={F}"
    for first, second in zip(*runs):
        assert_bitwise(second, first, f"{context}: runs differ")
    leaves = (x.double().requires_grad_(), value.double().requires_grad_())
    want, want_arg = spmm_reference(rowptr, col, leaves[1], leaves[0], reduce)
    want_grads = torch.autograd.grad(want, leaves, grad.double())
    if want_arg is not None:
        assert torch.equal(runs[0][1].cpu(), want_arg), f"{context}: arg"
    bounds = sum_bounds(rowptr, col, value, x, grad, reduce, want.detach(), want_arg)
    for name, have, expected, (terms, mag) in zip(("out", "x's gradient", "value's gradient"),
                                                 runs[0][:1] + runs[0][-2:], (want.detach(),) + want_grads, bounds):
        assert_sum_close(have, expected, terms, mag, f"{context}: {name}")


def sum_bounds(rowptr: Tensor, col: Tensor, value: Tensor, x: Tensor, grad: Tensor, reduce: str, out: Tensor,
               arg: Optional[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """(terms, mag) of spmm's output, x's gradient and value's gradient, in
    float64: each is a sum (min and max: of the products at the arg edges,
    their output one product) of `terms` rounded operations at most, over
    products whose magnitudes add up to `mag`."""
    nnz, F = col.numel(), x.size(1)
    degree = rowptr.diff()
    row = torch.repeat_interleave(degree, output_size=nnz)
    weight = value.double().abs()
    if reduce == "mean":
        weight = weight / degree.clamp(min=1)[row].double()
    chosen = torch.ones(nnz, F, dtype=torch.float64)
    if arg is not None:
        chosen = (arg[row] == torch.arange(nnz).view(-1, 1)).double()
    x_at, g_at = x.double().abs()[col], grad.double().abs()[row]
    if arg is None:
        out_bound = (degree.view(-1, 1) + 2, torch.zeros_like(out).index_add_(0, row, weight.view(-1, 1) * x_at))
    else:
        out_bound = (torch.ones(1), out.abs())
    x_bound = (torch.bincount(col, minlength=x.size(0)).view(-1, 1) + 2,
               torch.zeros(x.shape, dtype=torch.float64).index_add_(0, col, weight.view(-1, 1) * g_at * chosen))
    value_mag = (g_at * x_at * chosen).sum(1)
    if reduce == "mean":
        value_mag = value_mag / degree.clamp(min=1)[row].double()
    return [out_bound, x_bound, (torch.full((1,), F + 2), value_mag)]


def assert_sum_close(have: Tensor, want: Tensor, terms: Tensor, mag: Tensor, context: str) -> None:
    """float32 `have` against the float64 `want`: within
    (gamma(terms, 2**-24) + gamma(terms, 2**-53)) * mag, the error bound of a
    float32 sum of that many rounded operations in any order (Higham,
    "Accuracy and Stability of Numerical Algorithms", sec. 3.1), as
    scatter_reference.assert_reduced_close rules the scatter family."""
    def gamma(k: Tensor, u: float) -> Tensor:
        return k * u / (1 - k * u)

    assert have.dtype == torch.float32 and have.shape == want.shape, context
    err = (have.double().cpu() - want).abs()
    tol = (gamma(terms.double(), 2.0**-24) + gamma(terms.double(), 2.0**-53)) * mag
    bad = ~(err <= tol)
    assert not bad.any(), (f"{context}: {int(bad.sum())} of {bad.numel()} elements off; worst error "
                           f"{float(err.max())}, excess over the bound {float((err - tol).max())}")
