"""torchplug.add against plain PyTorch (``a + b``) on the same inputs.

a + b is a single rounding of the exact sum for every dtype torchplug.add takes
(half types are computed in float32 and rounded once, like PyTorch does), so
results must match PyTorch bit for bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.autograd import gradcheck, gradgradcheck

import torchplug

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
DTYPES = FLOAT_DTYPES + INT_DTYPES

# Value ranges per integer dtype: uint8 uses its whole range (unsigned wrap-around
# is well defined and must match PyTorch); signed types stay clear of overflow.
INT_RANGES = {
    torch.uint8: (0, 256),
    torch.int8: (-60, 60),
    torch.int16: (-10_000, 10_000),
    torch.int32: (-1_000_000, 1_000_000),
    torch.int64: (-(2**40), 2**40),
}


def make(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """Random tensor of `shape` with no zero elements (never an all-zero input)."""
    if dtype.is_floating_point:
        t = torch.randn(shape, dtype=torch.float32, device=device) * 4
        t = torch.where(t == 0, torch.ones_like(t), t)
        return t.to(dtype)
    lo, hi = INT_RANGES[dtype]
    t = torch.randint(lo, hi, shape, dtype=torch.int64, device=device)
    return torch.where(t == 0, torch.ones_like(t), t).to(dtype)


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same shape, dtype and device, and the same values bit for bit."""
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    assert actual.device == expected.device
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def assert_adds_like_torch(a: torch.Tensor, b: torch.Tensor) -> None:
    """torchplug.add agrees with ``a + b`` bit for bit, in either order."""
    assert_same(torchplug.add(a, b), a + b)
    assert_same(torchplug.add(b, a), b + a)


SHAPES = [
    pytest.param((0,), (0,), id="empty"),
    pytest.param((3, 0), (1,), id="empty-bcast"),
    pytest.param((0, 4), (4,), id="empty-rows"),
    pytest.param((), (), id="0d-0d"),
    pytest.param((), (3, 4), id="0d-Nd"),
    pytest.param((2, 3, 4), (), id="Nd-0d"),
    pytest.param((1,), (5,), id="1-vs-5"),
    pytest.param((7,), (7,), id="1d"),
    pytest.param((2, 3, 4), (2, 3, 4), id="3d"),
    pytest.param((2, 1, 3, 1, 2), (2, 4, 3, 5, 2), id="5d-bcast"),
    pytest.param((5, 3), (3,), id="bcast-trailing"),
    pytest.param((3,), (5, 3), id="bcast-leading"),
    pytest.param((4, 1, 5), (1, 3, 5), id="bcast-both-ways"),
    pytest.param((3, 1), (1, 4), id="outer-product"),
    pytest.param((1_000_003,), (1_000_003,), id="large-odd"),
    pytest.param((1001, 33), (33,), id="large-odd-bcast"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape_a, shape_b", SHAPES)
def test_matches_torch(shape_a: tuple, shape_b: tuple, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(0)
    a = make(shape_a, dtype, device)
    b = make(shape_b, dtype, device)
    assert_same(torchplug.add(a, b), a + b)
    assert_same(torch.ops.torchplug.add(a, b), a + b)


def _strided_operands(kind: str, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs of inputs that are not plain contiguous tensors."""
    if kind == "transposed":
        return make((37, 29), dtype, device).t(), make((29, 37), dtype, device)
    if kind == "transposed-tiles":
        # More rows and columns than a CPU tile, neither a multiple of it.
        return make((300, 650), dtype, device).t(), make((650, 300), dtype, device)
    if kind == "both-transposed":
        return make((37, 29), dtype, device).t(), make((37, 29), dtype, device).t()
    if kind == "sliced-step":
        return make((64, 50), dtype, device)[::3, 1::2], make((22, 25), dtype, device)
    if kind == "offset-1":
        # Storage offset 1 element: breaks 16-byte alignment of vectorised paths.
        return make((100_003,), dtype, device)[1:], make((100_003,), dtype, device)[:-1]
    if kind == "offset-both":
        return make((4099,), dtype, device)[3:], make((4101,), dtype, device)[5:]
    if kind == "offset-out-of-phase":
        # Same length, different misalignments, odd length: vector tail + head.
        return make((1_000_010,), dtype, device)[1:-6], make((1_000_010,), dtype, device)[2:-5]
    if kind == "expanded":
        return make((1, 40), dtype, device).expand(30, 40), make((30, 1), dtype, device)
    if kind == "transposed-bcast":
        return make((16, 9, 5), dtype, device).permute(2, 0, 1), make((9,), dtype, device)
    raise AssertionError(kind)


STRIDED = [
    "transposed",
    "transposed-tiles",
    "both-transposed",
    "sliced-step",
    "offset-1",
    "offset-both",
    "offset-out-of-phase",
    "expanded",
    "transposed-bcast",
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", STRIDED)
def test_non_contiguous(kind: str, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(1)
    a, b = _strided_operands(kind, dtype, device)
    assert not a.is_contiguous() or a.storage_offset() > 0  # really not a plain tensor
    assert_adds_like_torch(a, b)


PROMOTIONS = [
    (torch.int32, torch.float32),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.float16),
    (torch.uint8, torch.int8),
    (torch.int64, torch.float16),
    (torch.int16, torch.int64),
    (torch.float32, torch.float64),
    (torch.uint8, torch.bfloat16),
]


@pytest.mark.parametrize("dtype_a, dtype_b", PROMOTIONS, ids=str)
@pytest.mark.parametrize("swap", [False, True])
def test_type_promotion(dtype_a: torch.dtype, dtype_b: torch.dtype, swap: bool, device: str) -> None:
    torch.manual_seed(2)
    a = make((6, 5), dtype_a, device)
    b = make((5,), dtype_b, device)
    if swap:
        a, b = b, a
    out = torchplug.add(a, b)
    assert out.dtype == torch.result_type(a, b)
    assert_same(out, a + b)


# Layouts of the row kernel (CUDA) and of the CPU rows: broadcasts along rows
# and columns, rows that are and are not a multiple of the vector width (16
# bytes of output), dimensions above the row, one long row.
LAYOUTS = [
    pytest.param((64, 1), (1, 256), id="outer"),
    pytest.param((67, 1), (1, 131), id="outer-odd"),
    pytest.param((1, 131), (67, 1), id="outer-swapped"),
    pytest.param((300, 256), (256,), id="bias"),
    pytest.param((300, 33), (33,), id="bias-odd"),
    pytest.param((300, 8), (300, 1), id="column"),
    pytest.param((301, 37), (301, 1), id="column-odd"),
    pytest.param((3, 5, 7, 16), (5, 1, 16), id="4d-outer-dims"),
    pytest.param((2, 3, 1, 5), (1, 3, 4, 1), id="4d-mixed-bcast"),
    pytest.param((17,), (17,), id="1d-17"),
    pytest.param((4097,), (1,), id="1d-scalar-row"),
    pytest.param((100_003,), (100_003,), id="1d-large-odd"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape_a, shape_b", LAYOUTS)
def test_layouts(shape_a: tuple, shape_b: tuple, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(13)
    assert_adds_like_torch(make(shape_a, dtype, device), make(shape_b, dtype, device))


# Pairs read with a conversion in the kernel: AMP's half types with float32,
# integers with floats (wider and narrower than them), integers with integers.
MIXED = [
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.int32, torch.float32),
    (torch.int64, torch.float32),
    (torch.int32, torch.float16),
    (torch.uint8, torch.bfloat16),
    (torch.float32, torch.float64),
    (torch.bfloat16, torch.float16),
    (torch.uint8, torch.int8),
    (torch.int8, torch.int64),
]

MIXED_LAYOUTS = ["same", "outer", "bias", "column", "transposed", "sliced", "offset-1", "4d"]


def _mixed_operands(
    layout: str, dtype_a: torch.dtype, dtype_b: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    if layout == "same":
        return make((1001, 33), dtype_a, device), make((1001, 33), dtype_b, device)
    if layout == "outer":
        return make((129, 1), dtype_a, device), make((1, 260), dtype_b, device)
    if layout == "bias":
        return make((257, 64), dtype_a, device), make((64,), dtype_b, device)
    if layout == "column":
        return make((257, 64), dtype_a, device), make((257, 1), dtype_b, device)
    if layout == "transposed":
        return make((96, 130), dtype_a, device).t(), make((130, 96), dtype_b, device)
    if layout == "sliced":
        return make((40, 130), dtype_a, device)[:, ::2], make((40, 65), dtype_b, device)
    if layout == "offset-1":
        return make((10_001,), dtype_a, device)[1:], make((10_000,), dtype_b, device)
    if layout == "4d":
        return make((2, 3, 5, 8), dtype_a, device), make((3, 1, 8), dtype_b, device)
    raise AssertionError(layout)


@pytest.mark.parametrize("layout", MIXED_LAYOUTS)
@pytest.mark.parametrize("dtype_a, dtype_b", MIXED, ids=str)
def test_mixed_dtypes(layout: str, dtype_a: torch.dtype, dtype_b: torch.dtype, device: str) -> None:
    """Each input converted to the result dtype as it is read (no cast copies)
    gives PyTorch's result bit for bit, in either order."""
    torch.manual_seed(14)
    a, b = _mixed_operands(layout, dtype_a, dtype_b, device)
    assert torchplug.add(a, b).dtype == torch.result_type(a, b)
    assert_adds_like_torch(a, b)


def _free_cuda_bytes() -> int:
    return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else 0


@pytest.mark.skipif(_free_cuda_bytes() < 16 * 2**30, reason="needs a GPU with 16 GiB free")
@pytest.mark.parametrize("case", ["elements", "offsets"])
def test_beyond_32_bit_indices(case: str) -> None:
    """More than 2^31 elements, or an input whose offsets pass 2^31: the kernel
    takes 64-bit indices there."""
    torch.manual_seed(15)
    if case == "elements":  # 65537 x 32771 > 2^31 outputs
        a = make((65_537, 1), torch.uint8, "cuda")
        b = make((1, 32_771), torch.uint8, "cuda")
    else:  # 32769 outputs, a's last one 2^31 bytes in
        base = torch.randint(0, 256, (2**31 + 1,), dtype=torch.uint8, device="cuda")
        a = base[:: 2**16]
        b = make((a.numel(),), torch.uint8, "cuda")
    out = torchplug.add(a, b)
    expected = a + b
    assert out.shape == expected.shape and out.dtype == expected.dtype
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    "dtype_t, dtype_s",
    [
        (torch.float32, torch.float64),  # 0-d does not promote within its category
        (torch.int32, torch.float64),  # ... but does across categories -> default float
        (torch.float16, torch.float32),
        (torch.uint8, torch.int64),
    ],
    ids=str,
)
def test_zero_dim_promotion(dtype_t: torch.dtype, dtype_s: torch.dtype, device: str) -> None:
    torch.manual_seed(3)
    t = make((4, 3), dtype_t, device)
    s = make((), dtype_s, device)
    for a, b in ((t, s), (s, t)):
        out = torchplug.add(a, b)
        assert out.dtype == torch.result_type(a, b)
        assert_same(out, a + b)


GRAD_SHAPES = [
    pytest.param((3, 4), (3, 4), id="same"),
    pytest.param((3, 4), (4,), id="bcast-trailing"),
    pytest.param((2, 1, 3), (4, 1), id="bcast-both-ways"),
    pytest.param((), (3,), id="0d"),
    pytest.param((5, 1), (1, 1, 1), id="bcast-rank"),
]


@pytest.mark.parametrize("shape_a, shape_b", GRAD_SHAPES)
def test_gradcheck(shape_a: tuple, shape_b: tuple, device: str) -> None:
    torch.manual_seed(4)
    a = make(shape_a, torch.float64, device).requires_grad_()
    b = make(shape_b, torch.float64, device).requires_grad_()
    assert gradcheck(torchplug.add, (a, b))
    assert gradgradcheck(torchplug.add, (a, b))


@pytest.mark.parametrize("shape_a, shape_b", GRAD_SHAPES)
def test_grad_matches_torch(shape_a: tuple, shape_b: tuple, device: str) -> None:
    torch.manual_seed(5)
    a = make(shape_a, torch.float64, device).requires_grad_()
    b = make(shape_b, torch.float64, device).requires_grad_()
    grad_out = make(torch.broadcast_shapes(shape_a, shape_b), torch.float64, device)
    got = torch.autograd.grad(torchplug.add(a, b), (a, b), grad_out)
    want = torch.autograd.grad(a + b, (a, b), grad_out)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize(
    "dtype_a, dtype_b",
    [
        (torch.float32, torch.float64),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float64),
        (torch.float64, torch.float64),
    ],
    ids=str,
)
def test_grad_dtypes_under_promotion(dtype_a: torch.dtype, dtype_b: torch.dtype, device: str) -> None:
    """Each gradient has its input's dtype and shape, as PyTorch's ``a + b`` gives."""
    torch.manual_seed(6)
    a = make((4, 1, 3), dtype_a, device).requires_grad_()
    b = make((5, 3), dtype_b, device).requires_grad_()
    out = torchplug.add(a, b)
    grad_out = make(out.shape, out.dtype, device)
    got = torch.autograd.grad(out, (a, b), grad_out)
    want = torch.autograd.grad(a + b, (a, b), grad_out)
    for g, w, x in zip(got, want, (a, b)):
        assert g.dtype == x.dtype == w.dtype
        assert g.shape == x.shape
        # Same reduction (sum over broadcast dims in the output dtype, then a
        # cast) as PyTorch's engine; default tolerances only for the sum order.
        torch.testing.assert_close(g, w)


def test_grad_only_one_input(device: str) -> None:
    torch.manual_seed(7)
    a = make((3, 4), torch.float32, device).requires_grad_()
    b = make((4,), torch.float32, device)
    out = torchplug.add(a, b)
    assert out.requires_grad
    out.backward(torch.ones_like(out) * 3)
    torch.testing.assert_close(a.grad, torch.full_like(a, 3), rtol=0, atol=0)
    assert b.grad is None


def test_integer_inputs_not_differentiable(device: str) -> None:
    torch.manual_seed(8)
    a = make((3,), torch.int32, device)
    b = make((3,), torch.float32, device).requires_grad_()
    out = torchplug.add(a, b)
    (g,) = torch.autograd.grad(out.sum(), (b,))
    torch.testing.assert_close(g, torch.ones_like(b), rtol=0, atol=0)


@pytest.mark.parametrize("grad_mode", ["enabled", "no_grad"])
def test_graph_only_when_grad_is_recorded(grad_mode: str, device: str) -> None:
    """Inputs that require grad get a node only where grad mode records one; the
    sums are the same either way."""
    torch.manual_seed(9)
    a = make((3, 4), torch.float32, device).requires_grad_()
    b = make((4,), torch.float32, device)
    with torch.set_grad_enabled(grad_mode == "enabled"):
        out = torchplug.add(a, b)
    torch.testing.assert_close(out.detach(), a.detach() + b, rtol=0, atol=0)
    assert out.requires_grad == (grad_mode == "enabled")
    assert (out.grad_fn is not None) == (grad_mode == "enabled")


def test_forward_mode_ad_is_refused_not_dropped(device: str) -> None:
    """Forward-mode AD is not supported: a dual input raises, naming the
    argument, rather than return a result without its tangent."""
    a = make((3, 4), torch.float32, device)
    b = make((4,), torch.float32, device)
    with fwAD.dual_level():
        dual = fwAD.make_dual(b, torch.ones_like(b))
        with pytest.raises(RuntimeError, match="torchplug::add: argument 'b' .*forward-mode"):
            torchplug.add(a, dual)


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_functorch_transforms(device: str) -> None:
    """vmap runs per sample (PyTorch's fallback); jvp is refused, as
    torch::autograd::Function refuses it."""
    a = make((2, 3, 4), torch.float32, device)
    b = make((2, 4), torch.float32, device)
    want = a + b.unsqueeze(1)
    torch.testing.assert_close(torch.vmap(torchplug.add)(a, b), want, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="functorch transforms"):
        torch.func.jvp(lambda x: torchplug.add(x, b[0]), (a[0],), (torch.ones_like(a[0]),))


def test_meta_shapes_and_dtype() -> None:
    a = torch.empty((4, 1, 5), dtype=torch.int32, device="meta")
    b = torch.empty((3, 1), dtype=torch.float16, device="meta")
    out = torchplug.add(a, b)
    assert out.device.type == "meta"
    assert out.shape == torch.broadcast_shapes(a.shape, b.shape)
    assert out.dtype == torch.result_type(a, b)


@pytest.mark.parametrize("bad", [torch.bool, torch.complex64])
@pytest.mark.parametrize("position", ["a", "b"])
def test_rejects_unsupported_dtype(bad: torch.dtype, position: str, device: str) -> None:
    torch.manual_seed(9)
    good = make((3,), torch.float32, device)
    wrong = torch.ones(3, device=device).to(bad)
    args = (wrong, good) if position == "a" else (good, wrong)
    with pytest.raises(RuntimeError, match=r"torchplug::add.*'" + position + "'"):
        torchplug.add(*args)


@pytest.mark.parametrize(
    "shape_a, shape_b", [((3,), (4,)), ((2, 3), (3, 2)), ((5, 4, 3), (2, 1, 3))], ids=str
)
def test_rejects_shapes_that_cannot_broadcast(shape_a: tuple, shape_b: tuple, device: str) -> None:
    torch.manual_seed(10)
    a = make(shape_a, torch.float32, device)
    b = make(shape_b, torch.float32, device)
    with pytest.raises(RuntimeError, match="torchplug::add"):
        torchplug.add(a, b)
    with pytest.raises(RuntimeError, match="torchplug::add"):
        torchplug.add(a.to("meta"), b.to("meta"))


def test_rejects_mixed_devices(cuda_device: str) -> None:
    torch.manual_seed(11)
    a = make((4, 3), torch.float32, cuda_device)
    b = make((4, 3), torch.float32, "cpu")
    for args in ((a, b), (b, a)):
        with pytest.raises(RuntimeError, match=r"torchplug::add.*'a'.*'b'"):
            torchplug.add(*args)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_gpu() -> None:
    torch.manual_seed(12)
    a = make((1003, 7), torch.float32, "cuda:1")
    b = make((7,), torch.float32, "cuda:1")
    out = torchplug.add(a, b)
    assert out.device == a.device
    assert_same(out, a + b)


@pytest.mark.parametrize(
    "shape_a, shape_b",
    [((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ()), ((1,), (3, 2)), ((2, 3), (2, 3))],
)
def test_backward_returns_each_input_shape(shape_a: tuple, shape_b: tuple, device: str) -> None:
    """add's own backward sums grad_out back to each input's shape. Called
    through the graph node directly: the autograd engine would otherwise sum
    a gradient of the broadcast shape down itself and hide a backward that
    forgot to (the result of torch.autograd.grad is the same either way)."""
    a = torch.randn(shape_a, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(shape_b, dtype=torch.float32, device=device, requires_grad=True)
    out = torchplug.add(a, b)
    grad = torch.randn(out.shape, dtype=out.dtype, device=device)
    grad_a, grad_b = out.grad_fn(grad)
    assert grad_a.shape == a.shape and grad_a.dtype == a.dtype
    assert grad_b.shape == b.shape and grad_b.dtype == b.dtype
    torch.testing.assert_close(grad_a, grad.sum_to_size(a.shape).to(a.dtype), rtol=0, atol=0)
    torch.testing.assert_close(grad_b, grad.sum_to_size(b.shape).to(b.dtype))
