"""edge_attention against the plain-PyTorch float64 reference of
attention_reference.py on the same (rounded) inputs: the three scores (gat,
gatv2, dot), every head count from 1 to 8, feature widths 1, 3, 8, 64 and
200, rows of 0 and 1 edges and one past CUDA's long-row split, N != M; the
gradients of src, dst and att against autograd of the reference, the layer
spmm_sum(edge_attention(...), x) and x's gradient, gradcheck and
gradgradcheck (with and without the transpose, with dropout), isolated rows,
-inf and NaN scores, bitwise repeatable backward, dropout's mask against the
same draw, errors, torch.compile and opcheck."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import torchplug
from attention_reference import (SCORES, edge_attention_reference, layer_reference, row_softmax_reference,
                                 scores_reference)
from op_table import TOLERANCE

WIDTHS = (1, 3, 8, 64, 200)
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
N = 300  # src's rows (columns of the adjacency); the graphs have M = 21 rows


def csr(degrees) -> Tensor:
    degrees = torch.as_tensor(degrees)
    return torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)])


def graph(g: torch.Generator, n: int = N):
    """(rowptr, col): rows of every length from 0 to 9, twice, and one of
    1,100 edges (past CUDA's split of rows longer than 1,024); M = 21 rows
    over n columns."""
    rowptr = csr(torch.cat([torch.arange(10).repeat(2), torch.tensor([1100])]))
    return rowptr, torch.randint(0, n, (int(rowptr[-1]),), generator=g)


def small_graph(g: torch.Generator, n: int = 6):
    """(rowptr, col) for gradcheck: rows of 0, 1, 3, 5 and 2 edges over n columns."""
    rowptr = csr([0, 1, 3, 5, 2])
    return rowptr, torch.randint(0, n, (int(rowptr[-1]),), generator=g)


def features(score: str, n: int, m: int, H: int, C: int, dtype: torch.dtype, g: torch.Generator):
    """(src, dst, att, scale) of the score's shapes in dtype. Scores stay of
    order 1 (dot scaled by 1 / sqrt(C), att by the same), so that rounding
    the scores to 2-byte types moves the weights within their tolerance."""
    shape = (H,) if score == "gat" else (H, C)
    src = torch.randn((n,) + shape, generator=g, dtype=torch.float64).to(dtype)
    dst = torch.randn((m,) + shape, generator=g, dtype=torch.float64).to(dtype)
    att = None
    if score == "gatv2":
        att = (torch.randn(shape, generator=g, dtype=torch.float64) / C ** 0.5).to(dtype)
    scale = C ** -0.5 if score == "dot" else 1.0
    return src, dst, att, scale


def to(device: str, *tensors):
    return tuple(None if t is None else t.to(device) for t in tensors)


def head_cases(score: str, dtype: torch.dtype):
    """(H, C): every pair in float32 and float64, a few in 2-byte types; gat
    has no C (None)."""
    full = dtype in (torch.float32, torch.float64)
    if score == "gat":
        return [(H, None) for H in (range(1, 9) if full else (1, 4, 8))]
    if full:
        return [(H, C) for H in range(1, 9) for C in WIDTHS]
    return [(1, 3), (4, 8), (8, 1), (3, 200), (2, 64)]


def leaves(device: str, *tensors):
    """Copies on device that require grad (None stays None)."""
    return tuple(None if t is None else t.detach().to(device).requires_grad_() for t in tensors)


# ---- forward -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("score", SCORES)
def test_forward_matches_reference(score: str, dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(0)
    rowptr, col = graph(g)
    M = rowptr.numel() - 1
    rtol, atol = TOLERANCE[dtype]
    for H, C in head_cases(score, dtype):
        src, dst, att, scale = features(score, N, M, H, C, dtype, g)
        want = edge_attention_reference(rowptr, col, src, dst, score, att, negative_slope=0.2, scale=scale)
        got = torchplug.edge_attention(*to(device, rowptr, col, src, dst), score, *to(device, att), scale=scale)
        assert got.dtype == dtype and got.device.type == device, f"H={H} C={C}"
        assert got.shape == (col.numel(), H), f"H={H} C={C}: shape {tuple(got.shape)}"
        torch.testing.assert_close(got.double().cpu(), want, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{score} H={H} C={C}\n{m}")


@pytest.mark.parametrize("score", SCORES)
def test_forward_options_and_row_sums(score: str, device: str) -> None:
    """Other negative slopes (1 is the identity) and scales; every row with
    edges sums to 1 per head."""
    g = torch.Generator().manual_seed(1)
    rowptr, col = graph(g)
    M = rowptr.numel() - 1
    row = torch.repeat_interleave(rowptr.diff(), output_size=col.numel())
    src, dst, att, _ = features(score, N, M, 3, 8, torch.float64, g)
    for slope, scale in [(0.0, 0.5), (0.01, 2.0), (1.0, 1.0)]:
        want = edge_attention_reference(rowptr, col, src, dst, score, att, negative_slope=slope, scale=scale)
        got = torchplug.edge_attention(*to(device, rowptr, col, src, dst), score, *to(device, att),
                                       negative_slope=slope, scale=scale).cpu()
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10,
                                   msg=lambda m: f"slope={slope} scale={scale}\n{m}")
        sums = torch.zeros(M, 3, dtype=torch.float64).index_add(0, row, got)
        nonempty = rowptr.diff() > 0
        torch.testing.assert_close(sums[nonempty], torch.ones_like(sums[nonempty]), rtol=0, atol=1e-12)
        assert (sums[~nonempty] == 0).all()


@pytest.mark.parametrize("score", SCORES)
def test_transpose_gives_the_same_results(score: str, device: str, assert_same_result) -> None:
    g = torch.Generator().manual_seed(2)
    rowptr, col = to(device, *graph(g))
    src, dst, att, scale = features(score, N, rowptr.numel() - 1, 4, 8, torch.float32, g)
    grad = torch.randn(col.numel(), 4, generator=g).to(device)
    transpose = torchplug.spmm_transpose(rowptr, col, N)
    runs = []
    for given in (None, transpose):
        inputs = leaves(device, src, dst, att)
        out = torchplug.edge_attention(rowptr, col, inputs[0], inputs[1], score, inputs[2], scale=scale,
                                       transpose=given)
        wanted = [t for t in inputs if t is not None]
        runs.append((out.detach(),) + torch.autograd.grad(out, wanted, grad))
    for name, a, b in zip(("alpha", "src", "dst", "att"), *runs):
        assert_same_result(a, b)


# ---- gradients -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("score", SCORES)
def test_gradients_against_reference(score: str, dtype: torch.dtype, device: str) -> None:
    """src's, dst's (and att's) gradients against autograd of the float64
    reference, on the same rounded inputs."""
    g = torch.Generator().manual_seed(3)
    rowptr, col = graph(g)
    M = rowptr.numel() - 1
    rtol, atol = TOLERANCE[dtype]
    for H, C in [(1, 1), (4, 8), (8, 64), (3, 200)]:
        src, dst, att, scale = features(score, N, M, H, C, dtype, g)
        grad = torch.randn(col.numel(), H, generator=g, dtype=torch.float64).to(dtype)
        ref = leaves("cpu", *(None if t is None else t.double() for t in (src, dst, att)))
        ref_out = edge_attention_reference(rowptr, col, ref[0], ref[1], score, ref[2], negative_slope=0.1,
                                           scale=scale)
        want = torch.autograd.grad(ref_out, [t for t in ref if t is not None], grad.double())
        mine = leaves(device, src, dst, att)
        out = torchplug.edge_attention(*to(device, rowptr, col), mine[0], mine[1], score, mine[2],
                                       negative_slope=0.1, scale=scale)
        got = torch.autograd.grad(out, [t for t in mine if t is not None], grad.to(device))
        for name, have, expected in zip(("src", "dst", "att"), got, want):
            assert have.dtype == dtype and have.shape == expected.shape, f"{name} H={H} C={C}"
            torch.testing.assert_close(have.double().cpu(), expected, rtol=rtol, atol=atol,
                                       msg=lambda m: f"{name} H={H} C={C}\n{m}")


def layer(rowptr, col, src, dst, score, att, scale, x, **kwargs) -> Tensor:
    return torchplug.spmm_sum(rowptr, col, torchplug.edge_attention(rowptr, col, src, dst, score, att,
                                                                    scale=scale, **kwargs), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("score", SCORES)
def test_layer_against_reference(score: str, dtype: torch.dtype, device: str) -> None:
    """out = spmm_sum(edge_attention(...), x) and the gradients of src, dst,
    att and x against the reference's weights times the gathered messages
    added row by row."""
    g = torch.Generator().manual_seed(4)
    rowptr, col = graph(g)
    M, H, C = rowptr.numel() - 1, 4, 16
    rtol, atol = TOLERANCE[dtype]
    src, dst, att, scale = features(score, N, M, H, C, dtype, g)
    x = torch.randn(N, H, 8, generator=g, dtype=torch.float64).to(dtype)
    grad = torch.randn(M, H, 8, generator=g, dtype=torch.float64).to(dtype)
    ref = leaves("cpu", *(None if t is None else t.double() for t in (src, dst, att, x)))
    ref_out = layer_reference(rowptr, col, edge_attention_reference(rowptr, col, ref[0], ref[1], score, ref[2],
                                                                    scale=scale), ref[3])
    want = (ref_out.detach(),) + torch.autograd.grad(ref_out, [t for t in ref if t is not None], grad.double())
    mine = leaves(device, src, dst, att, x)
    out = layer(*to(device, rowptr, col), mine[0], mine[1], score, mine[2], scale, mine[3])
    got = (out.detach(),) + torch.autograd.grad(out, [t for t in mine if t is not None], grad.to(device))
    names = ("out", "src", "dst") + (("att",) if att is not None else ()) + ("x",)
    for name, have, expected in zip(names, got, want):
        assert have.dtype == dtype and have.shape == expected.shape, name
        torch.testing.assert_close(have.double().cpu(), expected, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{name}\n{m}")


@pytest.mark.parametrize("dropout", [0.0, 0.4], ids=["no_dropout", "dropout"])
@pytest.mark.parametrize("transposed", [False, True], ids=["built", "given_transpose"])
@pytest.mark.parametrize("score", SCORES)
def test_gradcheck_and_gradgradcheck(score: str, transposed: bool, dropout: float, device: str) -> None:
    g = torch.Generator().manual_seed(5)
    rowptr, col = to(device, *small_graph(g))
    transpose = torchplug.spmm_transpose(rowptr, col, 6) if transposed else None
    for H, C in [(1, 2), (3, 2)]:
        src, dst, att, _ = features(score, 6, rowptr.numel() - 1, H, C, torch.float64, g)
        inputs = [t for t in leaves(device, src, dst, att) if t is not None]

        def fn(*args):
            # A freshly seeded generator: the same mask on every evaluation.
            gen = torch.Generator(device=device).manual_seed(7) if dropout else None
            return torchplug.edge_attention(rowptr, col, args[0], args[1], score, *args[2:], scale=0.7,
                                            dropout=dropout, generator=gen, transpose=transpose)

        assert torch.autograd.gradcheck(fn, inputs), f"H={H}"
        assert torch.autograd.gradgradcheck(fn, inputs), f"H={H}"


# ---- isolated rows and special values ---------------------------------------------------


@pytest.mark.parametrize("score", SCORES)
def test_isolated_rows_give_only_the_bias(score: str, device: str) -> None:
    g = torch.Generator().manual_seed(6)
    rowptr, col = graph(g)
    M, H = rowptr.numel() - 1, 2
    empty = rowptr.diff() == 0
    assert empty.any()
    src, dst, att, scale = features(score, N, M, H, 4, torch.float32, g)
    x = torch.randn(N, H, 5, generator=g)
    bias = torch.randn(H, 5, generator=g)
    mine = leaves(device, src, dst, att)
    out = layer(*to(device, rowptr, col), mine[0], mine[1], score, mine[2], scale, x.to(device))
    assert (out[empty.to(device)] == 0).all(), "isolated rows must aggregate to exactly 0"
    with_bias = (out + bias.to(device)).cpu()
    assert torch.equal(with_bias[empty], bias.expand(int(empty.sum()), H, 5))
    # dst of an isolated row does not take part: its gradient is exactly 0.
    grad_dst = torch.autograd.grad(out.sum(), mine[1])[0].cpu()
    assert (grad_dst[empty] == 0).all()


def masked_inputs(score: str, g: torch.Generator):
    """A graph whose column 0 scores -inf on every edge (src[0] = -inf, dst and
    att positive): row 1's edges all come from column 0."""
    rowptr = csr([3, 2, 0, 4, 1])
    col = torch.tensor([0, 1, 2, 0, 0, 3, 0, 4, 2, 1])
    src, dst, att, scale = features(score, 5, 5, 3, 4, torch.float64, g)
    dst = dst.abs() + 0.1
    att = None if att is None else att.abs() + 0.1
    src[0] = float("-inf")
    return rowptr, col, src, dst, att, scale


@pytest.mark.parametrize("score", SCORES)
def test_minus_inf_masks_its_edge(score: str, device: str) -> None:
    g = torch.Generator().manual_seed(7)
    rowptr, col, src, dst, att, scale = masked_inputs(score, g)
    want = edge_attention_reference(rowptr, col, src, dst, score, att, scale=scale)
    got = torchplug.edge_attention(*to(device, rowptr, col, src, dst), score, *to(device, att), scale=scale).cpu()
    masked = col == 0
    assert (got[masked] == 0).all(), f"-inf scores must weigh exactly 0, got {got[masked]}"
    assert torch.isfinite(got).all(), got
    row = torch.repeat_interleave(rowptr.diff(), output_size=col.numel())
    sums = torch.zeros(5, 3, dtype=torch.float64).index_add(0, row, got)
    torch.testing.assert_close(sums[[0, 3, 4]], torch.ones(3, 3, dtype=torch.float64), rtol=0, atol=1e-12)
    assert (sums[[1, 2]] == 0).all(), "a row of -inf scores (and an empty row) must give zeros"
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("score", SCORES)
def test_nan_poisons_only_its_row(score: str, device: str) -> None:
    g = torch.Generator().manual_seed(8)
    rowptr, col = graph(g)
    M = rowptr.numel() - 1
    src, dst, att, scale = features(score, N, M, 3, 4, torch.float64, g)
    bad = 3  # a row of 3 edges
    assert rowptr[bad + 1] - rowptr[bad] == 3
    dst[bad] = float("nan")
    want = edge_attention_reference(rowptr, col, src, dst, score, att, scale=scale)
    got = torchplug.edge_attention(*to(device, rowptr, col, src, dst), score, *to(device, att), scale=scale).cpu()
    inside = torch.zeros(col.numel(), dtype=torch.bool)
    inside[rowptr[bad]:rowptr[bad + 1]] = True
    assert got[inside].isnan().all(), "the NaN row's weights must be NaN"
    assert torch.isfinite(got[~inside]).all(), "a NaN must not leave its row"
    torch.testing.assert_close(got[~inside], want[~inside], rtol=1e-10, atol=1e-10)


# ---- determinism and dropout -----------------------------------------------------------


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "use_deterministic_algorithms"])
@pytest.mark.parametrize("score", SCORES)
def test_backward_repeats_bit_for_bit(score: str, deterministic: bool, device: str) -> None:
    g = torch.Generator().manual_seed(9)
    rowptr, col = to(device, *graph(g))
    src, dst, att, scale = features(score, N, rowptr.numel() - 1, 8, 8, torch.float32, g)
    inputs = [t for t in leaves(device, src, dst, att) if t is not None]
    grad = torch.randn(col.numel(), 8, generator=g).to(device)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(deterministic)
        runs = []
        for _ in range(2):
            out = torchplug.edge_attention(rowptr, col, inputs[0], inputs[1], score, *inputs[2:], scale=scale)
            runs.append(torch.autograd.grad(out, inputs, grad))
    finally:
        torch.use_deterministic_algorithms(before)
    for name, a, b in zip(("src", "dst", "att"), *runs):
        assert torch.equal(a, b), f"{name}: two backward passes differ"


def dropout_mask(shape, p: float, seed: int, device: str) -> Tensor:
    """The op's documented draw: float32 Bernoulli(1 - p) from a generator seeded with seed."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.empty(shape, dtype=torch.float32, device=device).bernoulli_(1 - p, generator=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("score", SCORES)
def test_dropout_same_seed_same_mask_and_reference(score: str, dtype: torch.dtype, device: str) -> None:
    g = torch.Generator().manual_seed(10)
    rowptr, col = graph(g)
    p, H = 0.3, 4
    src, dst, att, scale = features(score, N, rowptr.numel() - 1, H, 8, dtype, g)
    args = to(device, rowptr, col, src, dst)
    runs = [torchplug.edge_attention(*args, score, *to(device, att), scale=scale, dropout=p,
                                     generator=torch.Generator(device=device).manual_seed(11)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1]), "the same seed must give the same result"
    other = torchplug.edge_attention(*args, score, *to(device, att), scale=scale, dropout=p,
                                     generator=torch.Generator(device=device).manual_seed(12))
    assert not torch.equal(runs[0] == 0, other == 0), "another seed must give another mask"
    keep = dropout_mask((col.numel(), H), p, 11, device).double().cpu()
    want = edge_attention_reference(rowptr, col, src, dst, score, att, scale=scale) * keep / (1 - p)
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(runs[0].double().cpu(), want, rtol=rtol, atol=atol)
    assert torch.equal(runs[0].cpu() == 0, keep == 0), "dropped weights must be exactly the mask's zeros"


def test_dropout_drops_about_p(device: str) -> None:
    """p = 0.3 over 100,000 weights: the dropped count within 5 sigma of 30,000."""
    g = torch.Generator().manual_seed(13)
    M, n, deg, H, p = 1000, 500, 25, 4, 0.3
    rowptr = csr(torch.full((M,), deg))
    col = torch.randint(0, n, (M * deg,), generator=g)
    src, dst = torch.randn(n, H, generator=g), torch.randn(M, H, generator=g)
    out = torchplug.edge_attention(*to(device, rowptr, col, src, dst), dropout=p,
                                   generator=torch.Generator(device=device).manual_seed(14))
    total = out.numel()
    dropped = int((out == 0).sum())
    sigma = (total * p * (1 - p)) ** 0.5
    assert abs(dropped - p * total) < 5 * sigma, f"dropped {dropped} of {total}, expected {p * total:.0f}"
    alpha = torchplug.edge_attention(*to(device, rowptr, col, src, dst))
    kept = out != 0
    torch.testing.assert_close(out[kept], alpha[kept] / (1 - p), msg="kept weights must be scaled by 1 / (1 - p)")


@pytest.mark.parametrize("score", SCORES)
def test_dropout_gradient_uses_the_same_mask(score: str, device: str) -> None:
    g = torch.Generator().manual_seed(15)
    rowptr, col = graph(g)
    p, H = 0.5, 3
    src, dst, att, scale = features(score, N, rowptr.numel() - 1, H, 8, torch.float64, g)
    grad = torch.randn(col.numel(), H, generator=g, dtype=torch.float64)
    keep = dropout_mask((col.numel(), H), p, 16, device).double().cpu()
    ref = leaves("cpu", src, dst, att)
    ref_out = edge_attention_reference(rowptr, col, ref[0], ref[1], score, ref[2], scale=scale) * keep / (1 - p)
    want = torch.autograd.grad(ref_out, [t for t in ref if t is not None], grad)
    mine = leaves(device, src, dst, att)
    out = torchplug.edge_attention(*to(device, rowptr, col), mine[0], mine[1], score, mine[2], scale=scale,
                                   dropout=p, generator=torch.Generator(device=device).manual_seed(16))
    got = torch.autograd.grad(out, [t for t in mine if t is not None], grad.to(device))
    for name, have, expected in zip(("src", "dst", "att"), got, want):
        torch.testing.assert_close(have.cpu(), expected, rtol=1e-10, atol=1e-10, msg=lambda m: f"{name}\n{m}")


# ---- errors ------------------------------------------------------------------------------


def test_errors_name_op_and_argument() -> None:
    rowptr, col = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1])
    src, dst = torch.randn(2, 2), torch.randn(2, 2)
    op = "torchplug::edge_attention: "
    with pytest.raises(RuntimeError, match=op + r"argument 'score' must be \"gat\", \"gatv2\" or \"dot\""):
        torchplug.edge_attention(rowptr, col, src, dst, score="gatv3")
    with pytest.raises(RuntimeError, match=op + r"argument 'dst' of shape \[3, 2\]"):
        torchplug.edge_attention(rowptr, col, src, torch.randn(3, 2))
    with pytest.raises(RuntimeError, match=op + r"argument 'dst' of shape \[2, 2, 4\]"):
        torchplug.edge_attention(rowptr, col, torch.randn(2, 2, 3), torch.randn(2, 2, 4), score="dot")
    with pytest.raises(RuntimeError, match=op + r"argument 'att' \[H, C\] is required"):
        torchplug.edge_attention(rowptr, col, torch.randn(2, 2, 3), torch.randn(2, 2, 3), score="gatv2")
    with pytest.raises(RuntimeError, match=op + r"argument 'att' is only taken by score \"gatv2\""):
        torchplug.edge_attention(rowptr, col, src, dst, att=torch.randn(2, 1))
    with pytest.raises(RuntimeError, match=op + r"argument 'att' is only taken by score \"gatv2\""):
        torchplug.edge_attention(rowptr, col, torch.randn(2, 2, 3), torch.randn(2, 2, 3), score="dot",
                                 att=torch.randn(2, 3))
    for p in (1.0, -0.1):
        with pytest.raises(RuntimeError, match=op + r"argument 'dropout' must be in \[0, 1\)"):
            torchplug.edge_attention(rowptr, col, src, dst, dropout=p)
    for bad in (torch.tensor([0, 1, 2]), torch.tensor([0, -1, 1])):
        with pytest.raises((IndexError, RuntimeError), match=op + r"argument 'col'"):
            torchplug.edge_attention(rowptr, bad, src, dst)


# ---- torch.compile and opcheck -----------------------------------------------------------



@pytest.mark.parametrize("requires_grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("score", SCORES)
def test_compile_fullgraph_matches_eager(score: str, requires_grad: bool, device: str) -> None:
    """edge_attention + spmm_sum compiled with fullgraph=True against eager:
    the output, and in training the gradients of src and dst."""
    g = torch.Generator().manual_seed(17)
    rowptr, col = to(device, *graph(g, 40))
    src, dst, att, scale = features(score, 40, rowptr.numel() - 1, 2, 4, torch.float32, g)
    x = torch.randn(40, 2, 3, generator=g).to(device)

    att = None if att is None else att.to(device)

    def step(src: Tensor, dst: Tensor, x: Tensor) -> Tensor:
        alpha = torchplug.edge_attention(rowptr, col, src, dst, score, att, scale=scale)
        return torchplug.spmm_sum(rowptr, col, alpha, x).relu()

    eager_in = [t.to(device).requires_grad_(requires_grad) for t in (src, dst)]
    compiled_in = [t.to(device).requires_grad_(requires_grad) for t in (src, dst)]
    want = step(*eager_in, x)
    got = torch.compile(step, fullgraph=True)(*compiled_in, x)
    torch.testing.assert_close(got, want)
    if requires_grad:
        grad = torch.randn(want.shape, generator=g).to(device)
        for name, a, b in zip(("src", "dst"), torch.autograd.grad(got, compiled_in, grad),
                              torch.autograd.grad(want, eager_in, grad)):
            torch.testing.assert_close(a, b, msg=lambda m: f"{name}\n{m}")


@pytest.mark.parametrize("requires_grad", [False, True], ids=["inference", "training"])
def test_opcheck(requires_grad: bool, device: str) -> None:
    """opcheck's default test_utils (as ops/spmm/test_spmm.py) on a sample of
    each score, with inputs that do and do not require grad."""
    g = torch.Generator().manual_seed(18)
    rowptr, col = to(device, *small_graph(g))
    op = torch.ops.torchplug.edge_attention.default
    for score in SCORES:
        src, dst, att, scale = features(score, 6, rowptr.numel() - 1, 2, 3, torch.float64, g)
        src, dst = (t.to(device).requires_grad_(requires_grad) for t in (src, dst))
        att = None if att is None else att.to(device).requires_grad_(requires_grad)
        torch.library.opcheck(op, (rowptr, col, src, dst, score, att, 0.2, scale, 0.0, None, None, None, None))


@pytest.mark.parametrize("score", SCORES)
def test_fused_kernels_opcheck_and_match_the_reference(score: str, device: str) -> None:
    """The fused kernels directly, with opcheck (their Meta kernels):
    edge_attention_softmax against the reference's weights,
    edge_attention_score_grad against autograd of the reference's softmax
    (gat: through the value before the activation), and gatv2's ends against
    autograd of its scores, each output alone and all three."""
    g = torch.Generator().manual_seed(19)
    rowptr, col = graph(g, 30)
    M = rowptr.numel() - 1
    src, dst, att, scale = features(score, 30, M, 3, 5, torch.float64, g)
    ops = torch.ops.torchplug
    args = to(device, rowptr, col, src, dst)
    options = (score, None if att is None else att.to(device), 0.2, scale)
    alpha = ops.edge_attention_softmax(*args, *options)
    torch.testing.assert_close(alpha.cpu(), edge_attention_reference(rowptr, col, src, dst, score, att,
                                                                     negative_slope=0.2, scale=scale))
    grad = torch.randn(col.numel(), 3, generator=g, dtype=torch.float64)
    if score == "gat":  # the value before the activation is the leaf
        pre = (src[col] + dst.repeat_interleave(rowptr.diff(), dim=0)).requires_grad_()
        weights = row_softmax_reference(rowptr, torch.nn.functional.leaky_relu(pre, 0.2))
        want = torch.autograd.grad(weights, pre, grad)[0]
    else:
        scores = scores_reference(rowptr, col, src, dst, score, att, 0.2, scale).detach().requires_grad_()
        want = torch.autograd.grad(row_softmax_reference(rowptr, scores), scores, grad)[0]
    torch.testing.assert_close(ops.edge_attention_score_grad(grad.to(device), *args, *options).cpu(), want)
    torch.library.opcheck(ops.edge_attention_softmax.default, (*args, *options))
    torch.library.opcheck(ops.edge_attention_score_grad.default, (grad.to(device), *args, *options))
    if score != "gatv2":
        return
    leaves_ = leaves("cpu", src, dst, att)
    want_grads = torch.autograd.grad(scores_reference(rowptr, col, *leaves_[:2], "gatv2", leaves_[2], 0.2, 1.0),
                                     leaves_, grad)
    colptr, row, perm = torchplug.spmm_transpose(rowptr, col, 30)
    transpose = to(device, colptr, row, perm)
    gatv2_args = (*args, att.to(device), 0.2)
    for mask in ([True, True, True], [True, False, False], [False, True, False], [False, False, True]):
        got = ops.edge_attention_gatv2_backward(grad.to(device), *gatv2_args, *transpose, mask)
        for wanted, have, expected in zip(mask, got, want_grads):
            if wanted:
                torch.testing.assert_close(have.cpu(), expected)
    torch.library.opcheck(ops.edge_attention_gatv2_backward.default,
                          (grad.to(device), *gatv2_args, *transpose, [True, True, True]))
    with pytest.raises(RuntimeError, match="edge_attention_gatv2_backward: src's gradient needs the transpose"):
        ops.edge_attention_gatv2_backward(grad.to(device), *gatv2_args, None, None, None, [True, False, False])
    with pytest.raises(RuntimeError, match="edge_attention_gatv2_backward: argument 'grad' must be a Double tensor"):
        ops.edge_attention_gatv2_backward(grad.float().to(device), *gatv2_args, *transpose, [True, True, True])


@pytest.mark.parametrize("score", SCORES)
def test_non_contiguous_indices_and_features(score: str, device: str) -> None:
    """col and the transpose's tensors as strided views, src permuted: the
    same weights and gradients as from contiguous copies."""
    g = torch.Generator().manual_seed(23)
    rowptr, col = graph(g, 30)
    src, dst, att, scale = features(score, 30, rowptr.numel() - 1, 3, 4, torch.float64, g)
    strided = torch.stack([col, torch.zeros_like(col)], 1)[:, 0]
    transpose = torchplug.spmm_transpose(rowptr, col, 30)
    transpose_strided = tuple(torch.stack([t, t], 1)[:, 0] for t in transpose)
    permuted = src.transpose(0, -1).contiguous().transpose(0, -1)  # the same values, other strides
    results = []
    for c, s_, t in ((col, src, transpose), (strided, permuted, transpose_strided)):
        s_, d = leaves(device, s_, dst)
        alpha = torchplug.edge_attention(*to(device, rowptr, c), s_, d, score, None if att is None else att.to(device),
                                         scale=scale, transpose=to(device, *t))
        results.append([alpha, *torch.autograd.grad(alpha.square().sum(), [s_, d])])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)
