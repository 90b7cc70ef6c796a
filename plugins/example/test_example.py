"""The example plugin, built against the installed torchplug as a plugin outside
this tree is (torchplug.jit.build_project), loaded with torchplug.load_plugin,
and linked from a separate C++ project through its own CMake package: edge_dot,
an op with kernels of its own, and segment_l2norm, an op on torchplug's
reduction layer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.library import opcheck

import torchplug
import torchplug.jit

HERE = Path(__file__).resolve().parent
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def prefix() -> Path:
    """The plugin's install prefix; the plugin is loaded (once per process)."""
    prefix = torchplug.jit.build_project(HERE)
    assert torchplug.load_plugin(prefix / "lib" / "libexample.so") == "example"
    return prefix


@pytest.fixture
def edge_dot(prefix: Path):
    return torch.ops.example.edge_dot


def reference(x: torch.Tensor, y: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch, in float64, rounded to x's dtype."""
    return (x.double()[src] * y.double()[dst]).sum(-1).to(x.dtype)


# One rounding to the dtype apart (float16, bfloat16), or sums of up to 1000
# products in another order (float32).
TOLERANCE = {
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float32: dict(rtol=1e-5, atol=1e-4),
    torch.float16: dict(rtol=2e-3, atol=1e-4),
    torch.bfloat16: dict(rtol=2e-2, atol=1e-3),
}


def assert_matches_reference(out: torch.Tensor, x, y, src, dst, msg: str | None = None) -> None:
    torch.testing.assert_close(out, reference(x, y, src, dst), **TOLERANCE[x.dtype], msg=msg)


def graph(device: str, dtype: torch.dtype, N: int, M: int, F: int, E: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N, F, generator=generator).to(device, dtype)
    y = torch.randn(M, F, generator=generator).to(device, dtype)
    src = torch.randint(0, N, (E,), generator=generator).to(device)
    dst = torch.randint(0, M, (E,), generator=generator).to(device)
    return x, y, src, dst


# ------------------------------------------------------------------ forward


# F = 1, 7: one value at a time; 64: one 16-byte vector per thread of a group;
# 200, 1000: more vectors than a warp has threads (CUDA), a partial tail of
# the CPU loop's lanes.
@pytest.mark.parametrize("F", [1, 7, 64, 200, 1000])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_reference(edge_dot, device: str, dtype: torch.dtype, F: int) -> None:
    x, y, src, dst = graph(device, dtype, N=50, M=30, F=F, E=300)
    out = edge_dot(x, y, src, dst)
    assert out.shape == (300,) and out.dtype == dtype and out.device == x.device
    assert_matches_reference(out, x, y, src, dst)


def test_many_edges(edge_dot, device: str) -> None:
    """Enough edges for every thread of the CPU pool."""
    x, y, src, dst = graph(device, torch.float32, N=2000, M=1000, F=32, E=100_000, seed=1)
    assert_matches_reference(edge_dot(x, y, src, dst), x, y, src, dst)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_sums_in_float(edge_dot, device: str, dtype: torch.dtype) -> None:
    """4096 products of 1: a running sum in float16 would stop at 2048, in bfloat16 at 256."""
    x = torch.ones(1, 4096, device=device, dtype=dtype)
    out = edge_dot(x, x, torch.zeros(3, dtype=torch.long, device=device), torch.zeros(3, dtype=torch.long, device=device))
    assert out.tolist() == [4096.0] * 3


def test_empty(edge_dot, device: str) -> None:
    index = torch.empty(0, dtype=torch.long, device=device)
    for N, M, F in [(5, 3, 4), (0, 0, 4), (5, 3, 0)]:
        x = torch.randn(N, F, device=device)
        y = torch.randn(M, F, device=device)
        out = edge_dot(x, y, index, index)
        assert out.shape == (0,) and out.dtype == x.dtype and out.device == x.device
    # No features: every edge scores 0.
    x = torch.randn(5, 0, device=device)
    out = edge_dot(x, x, torch.tensor([0, 4], device=device), torch.tensor([1, 1], device=device))
    assert out.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous(edge_dot, device: str, dtype: torch.dtype) -> None:
    x, y, src, dst = graph(device, dtype, N=40, M=30, F=24, E=200, seed=2)
    edge_index = torch.stack([src, dst], dim=1)  # [E, 2]: each row's src and dst are strided views
    wide = torch.randn(40, 64, device=device).to(dtype)
    views = {
        "x a column slice (rows in place)": (wide[:, 8:32], y),
        "x a column slice at an odd offset": (wide[:, 1:25], y),
        "y transposed": (x, y.t().contiguous().t()),
        "x expanded": (x[:1].expand(40, 24), y),
    }
    for what, (a, b) in views.items():
        out = edge_dot(a, b, edge_index[:, 0], edge_index[:, 1])
        assert_matches_reference(out, a, b, src, dst, msg=what)


# ------------------------------------------------------------------ the plugin


def test_registry(prefix: Path) -> None:
    (info,) = [op for op in torchplug.registry() if op.qualified_name == "example::edge_dot"]
    assert info.namespace == "example" and info.name == "edge_dot" and info.plugin == "example"
    assert info.schema == "edge_dot(Tensor x, Tensor y, Tensor src, Tensor dst) -> Tensor"
    assert {"CPU", "Meta"} <= set(info.backends)
    assert ("CUDA" in info.backends) == torchplug.with_cuda
    assert info.differentiable
    assert set(info.dtypes) == {"Float", "Double", "Half", "BFloat16"}
    assert info.doc
    assert info.op is torch.ops.example.edge_dot


def test_load_again_does_nothing(prefix: Path) -> None:
    assert torchplug.load_plugin(prefix / "lib" / "libexample.so") == "example"
    assert len([op for op in torchplug.registry() if op.namespace == "example"]) == 2


def test_installed_layout(prefix: Path) -> None:
    assert (prefix / "include" / "example" / "example.h").is_file()
    assert (prefix / "lib" / "cmake" / "example" / "exampleConfig.cmake").is_file()
    assert not (prefix / "include" / "example" / "example_kernel.h").exists()  # private


@pytest.mark.skipif(torchplug.with_cuda, reason="the installed torchplug has CUDA kernels")
@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_cpu_only_build_needs_no_cuda(prefix: Path) -> None:
    """Against a CPU-only torchplug the CUDA source is left out, and so is libtorch_cuda."""
    dynamic = subprocess.run(["readelf", "-d", str(prefix / "lib" / "libexample.so")],
                             capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert any("libtorch_cpu.so" in line for line in needed)
    assert not any("libtorch_cuda" in line or "libc10_cuda" in line for line in needed), needed


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_depends_on_scatter(prefix: Path) -> None:
    """DEPENDS scatter: segment_l2norm's backward calls torchplug::gather_csr
    through the dispatcher, no symbol of the scatter plugin, yet the library
    needs it, so that a C++ program linking the plugin loads it too."""
    dynamic = subprocess.run(["readelf", "-d", str(prefix / "lib" / "libexample.so")],
                             capture_output=True, text=True, check=True).stdout
    assert any("(NEEDED)" in line and "[libtorchplug_scatter.so]" in line for line in dynamic.splitlines()), dynamic


# ------------------------------------------------------------------ autograd


def test_gradcheck(edge_dot, device: str) -> None:
    x, y, src, dst = graph(device, torch.float64, N=6, M=5, F=3, E=20, seed=3)  # repeated indices
    x.requires_grad_()
    y.requires_grad_()
    assert torch.autograd.gradcheck(edge_dot, (x, y, src, dst))
    assert torch.autograd.gradgradcheck(edge_dot, (x, y, src, dst))


def test_gradients_match_reference(edge_dot, device: str) -> None:
    x, y, src, dst = graph(device, torch.float32, N=30, M=20, F=16, E=100, seed=4)
    grad_out = torch.randn(100, device=device)
    for needs in [(True, True), (True, False), (False, True)]:
        a = x.clone().requires_grad_(needs[0])
        b = y.clone().requires_grad_(needs[1])
        leaves = [t for t in (a, b) if t.requires_grad]
        grads = torch.autograd.grad(edge_dot(a, b, src, dst), leaves, grad_out)
        expected = torch.autograd.grad((a[src] * b[dst]).sum(-1), leaves, grad_out)
        for actual, wanted in zip(grads, expected):
            torch.testing.assert_close(actual, wanted)


def test_no_graph_without_grad(edge_dot, device: str) -> None:
    x, y, src, dst = graph(device, torch.float32, N=4, M=4, F=2, E=5)
    x.requires_grad_()
    with torch.no_grad():
        assert not edge_dot(x, y, src, dst).requires_grad
    assert edge_dot(x, y, src, dst).grad_fn is not None


# ------------------------------------------------------------------ compiler stacks


@pytest.mark.parametrize(
    "test_util",
    ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
     "test_aot_dispatch_dynamic"],
)
def test_opcheck(edge_dot, device: str, test_util: str) -> None:
    x, y, src, dst = graph(device, torch.float32, N=8, M=6, F=5, E=12, seed=5)
    for args in [(x, y, src, dst), (x.clone().requires_grad_(), y.clone().requires_grad_(), src, dst)]:
        result = opcheck(edge_dot.default, args, test_utils=test_util)
        assert result[test_util] == "SUCCESS", result


def test_compile_fullgraph(edge_dot, device: str) -> None:
    def link_probability(x, y, src, dst):
        return torch.sigmoid(edge_dot(torch.relu(x), y, src, dst))

    x, y, src, dst = graph(device, torch.float32, N=20, M=10, F=8, E=50, seed=6)
    x.requires_grad_()
    compiled = torch.compile(link_probability, fullgraph=True)
    out = compiled(x, y, src, dst)
    torch.testing.assert_close(out, link_probability(x, y, src, dst))
    (grad,) = torch.autograd.grad(out.sum(), x)
    (expected,) = torch.autograd.grad(link_probability(x, y, src, dst).sum(), x)
    torch.testing.assert_close(grad, expected)


# ------------------------------------------------------------------ errors


def test_errors_name_op_and_argument(edge_dot, device: str) -> None:
    x, y, src, dst = graph(device, torch.float32, N=4, M=3, F=2, E=5)
    cases = [
        ((x.int(), y, src, dst), RuntimeError, "example::edge_dot: argument 'x' has unsupported dtype Int"),
        ((x, y.double(), src, dst), RuntimeError, "example::edge_dot: arguments 'x' and 'y' must have the same dtype"),
        ((x, y, src.int(), dst), RuntimeError, "example::edge_dot: argument 'src' must be an int64 tensor, got Int"),
        ((x, y[:, :1], src, dst), RuntimeError,
         r"example::edge_dot: arguments 'x' and 'y' must have the same number of features F \(dim 1\), "
         r"got x of shape \[4, 2\] and y of shape \[3, 1\]"),
        ((x[0], y, src, dst), RuntimeError, r"example::edge_dot: argument 'x' must be 2-D \[N, F\]"),
        ((x, y, src, dst[:4]), RuntimeError,
         "example::edge_dot: arguments 'src' and 'dst' must have the same number of edges, got 5 and 4"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            edge_dot(*args)


def test_index_out_of_range_raises_on_cpu(edge_dot) -> None:
    x, y, src, dst = graph("cpu", torch.float32, N=4, M=3, F=2, E=5)
    with pytest.raises(IndexError, match=r"example::edge_dot: argument 'src' holds the value 4, out of range for x of 4 rows"):
        edge_dot(x, y, torch.tensor([0, 4, 1, 1, 1]), dst)
    with pytest.raises(IndexError, match="example::edge_dot: argument 'dst' holds the negative value -1"):
        edge_dot(x, y, src, torch.tensor([0, 2, -1, 1, 1]))


def test_mixed_devices(edge_dot, cuda_device: str) -> None:
    x, y, src, dst = graph(cuda_device, torch.float32, N=4, M=3, F=2, E=5)
    with pytest.raises(RuntimeError, match="example::edge_dot: expected all tensors on one device, .* argument 'src'"):
        edge_dot(x, y, src.cpu(), dst)


def test_cuda_index_out_of_range(edge_dot, cuda_device: str) -> None:
    """Outside checked mode an edge with a bad index scores 0 and gets no
    gradient; in checked mode it raises as on the CPU."""
    x, y, _, _ = graph(cuda_device, torch.float64, N=4, M=3, F=2, E=5)
    x.requires_grad_()
    y.requires_grad_()
    src = torch.tensor([0, 4, 1, -2, 3], device=cuda_device)
    dst = torch.tensor([2, 0, 5, 1, 1], device=cuda_device)
    with torchplug.checked(False):
        out = edge_dot(x, y, src, dst)
        grad_x, grad_y = torch.autograd.grad(out.sum(), (x, y))
    good = torch.tensor([0, 4])
    expected = torch.zeros(5, dtype=x.dtype, device=cuda_device)
    expected[good] = reference(x.detach(), y.detach(), src[good], dst[good])
    torch.testing.assert_close(out, expected)
    a, b = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    expected_grads = torch.autograd.grad(reference(a, b, src[good], dst[good]).sum(), (a, b))
    torch.testing.assert_close(grad_x, expected_grads[0])
    torch.testing.assert_close(grad_y, expected_grads[1])
    with torchplug.checked(True), pytest.raises(IndexError, match="example::edge_dot: argument 'src'"):
        edge_dot(x, y, src, dst)


# ------------------------------------------------------------------ segment_l2norm


@pytest.fixture
def segment_l2norm(prefix: Path):
    return torch.ops.example.segment_l2norm


L2_DTYPES = [torch.float32, torch.float64]


def l2_reference(src: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch, in float64, rounded to src's dtype."""
    squares = src.double().square()
    return torch.segment_reduce(squares, "sum", offsets=indptr, axis=0).sqrt().to(src.dtype)


def segments(device: str, dtype: torch.dtype, lengths: list[int], features: tuple[int, ...], seed: int = 0):
    """src [sum(lengths), *features] and the indptr of segments of `lengths`."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randn(sum(lengths), *features, generator=generator).to(device, dtype)
    indptr = torch.tensor([0, *lengths], device=device).cumsum(0)
    return src, indptr


def random_lengths(n: int, most: int, seed: int) -> list[int]:
    """n lengths in [0, most], a fifth of them about 0 (empty segments)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, most + 1, (n,), generator=generator)
    return (lengths * (torch.rand(n, generator=generator) > 0.2)).tolist()


# (): src [E]; (1,): F = 1; (16,), (3, 5): rows of several values, one
# trailing dimension or two.
@pytest.mark.parametrize("features", [(), (1,), (16,), (3, 5)], ids=str)
@pytest.mark.parametrize("dtype", L2_DTYPES, ids=str)
def test_segment_l2norm_matches_reference(
    segment_l2norm, device: str, dtype: torch.dtype, features: tuple[int, ...]
) -> None:
    src, indptr = segments(device, dtype, [3, 0, 1, 7, 0, 0, 12, 2], features)
    out = segment_l2norm(src, indptr)
    assert out.shape == (8, *features) and out.dtype == dtype and out.device == src.device
    torch.testing.assert_close(out, l2_reference(src, indptr))
    assert (out[[1, 4, 5]] == 0).all()  # empty segments


@pytest.mark.parametrize("dtype", L2_DTYPES, ids=str)
def test_segment_l2norm_many_segments(segment_l2norm, device: str, dtype: torch.dtype) -> None:
    """Enough values for every thread of the CPU pool, and long segments."""
    for lengths, features in [(random_lengths(3000, 40, seed=1), (8,)), ([5000, 1, 20000, 0, 3], (3,))]:
        src, indptr = segments(device, dtype, lengths, features, seed=2)
        torch.testing.assert_close(segment_l2norm(src, indptr), l2_reference(src, indptr))


def test_segment_l2norm_empty(segment_l2norm, device: str) -> None:
    cases = {
        "no segments": (torch.randn(0, 4, device=device), torch.zeros(1, dtype=torch.long, device=device)),
        "no values": (torch.randn(0, 4, device=device), torch.zeros(3, dtype=torch.long, device=device)),
        "no features": (torch.randn(5, 0, device=device), torch.tensor([0, 2, 5], device=device)),
    }
    for what, (src, indptr) in cases.items():
        out = segment_l2norm(src, indptr)
        assert out.shape == (indptr.numel() - 1, *src.shape[1:]), what
        assert (out == 0).all(), what


@pytest.mark.parametrize("dtype", L2_DTYPES, ids=str)
def test_segment_l2norm_non_contiguous(segment_l2norm, device: str, dtype: torch.dtype) -> None:
    src, indptr = segments(device, dtype, [4, 0, 9, 3], (6,), seed=3)
    wide = torch.randn(16, 20, device=device).to(dtype)
    views = {
        "a column slice": wide[:, 3:9],
        "transposed": src.t().contiguous().t(),
        "expanded": src[:1].expand(16, 6),
        "indptr strided": src,
    }
    for what, view in views.items():
        offsets = indptr.repeat_interleave(2)[::2] if what == "indptr strided" else indptr
        torch.testing.assert_close(segment_l2norm(view, offsets), l2_reference(view, indptr), msg=what)


def test_segment_l2norm_gradcheck(segment_l2norm, device: str) -> None:
    src, indptr = segments(device, torch.float64, [3, 0, 1, 4, 2], (3,), seed=4)
    src[4:8, 1] = 0  # a segment of zeros in one column: its gradient is 0
    src.requires_grad_()
    assert torch.autograd.gradcheck(segment_l2norm, (src, indptr))
    # Second derivatives where the norm is smooth (not at 0).
    src = segments(device, torch.float64, [3, 0, 1, 4, 2], (3,), seed=5)[0].requires_grad_()
    assert torch.autograd.gradgradcheck(segment_l2norm, (src, indptr))


@pytest.mark.parametrize("dtype", L2_DTYPES, ids=str)
def test_segment_l2norm_gradients_match_reference(segment_l2norm, device: str, dtype: torch.dtype) -> None:
    """Against torch.linalg.vector_norm per segment, a segment of zeros included."""
    lengths = [5, 0, 2, 8, 1]
    src, indptr = segments(device, dtype, lengths, (4,), seed=6)
    src[7:15, 2] = 0
    src.requires_grad_()
    grad_out = torch.randn(len(lengths), 4, device=device, dtype=dtype)
    (grad,) = torch.autograd.grad(segment_l2norm(src, indptr), src, grad_out)
    expected = torch.stack([torch.linalg.vector_norm(part, dim=0) for part in src.split(lengths)])
    (expected_grad,) = torch.autograd.grad(expected, src, grad_out)
    assert grad.isfinite().all()
    torch.testing.assert_close(grad, expected_grad)


def test_segment_l2norm_registry(prefix: Path) -> None:
    (info,) = [op for op in torchplug.registry() if op.qualified_name == "example::segment_l2norm"]
    assert info.plugin == "example" and info.schema == "segment_l2norm(Tensor src, Tensor indptr) -> Tensor"
    assert {"CPU", "Meta"} <= set(info.backends)
    assert ("CUDA" in info.backends) == torchplug.with_cuda
    assert info.differentiable and set(info.dtypes) == {"Float", "Double"} and info.doc


@pytest.mark.parametrize(
    "test_util",
    ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
     "test_aot_dispatch_dynamic"],
)
def test_segment_l2norm_opcheck(segment_l2norm, device: str, test_util: str) -> None:
    src, indptr = segments(device, torch.float32, [2, 0, 3, 1], (5,), seed=7)
    for args in [(src, indptr), (src.clone().requires_grad_(), indptr)]:
        result = opcheck(segment_l2norm.default, args, test_utils=test_util)
        assert result[test_util] == "SUCCESS", result


def test_segment_l2norm_errors_name_op_and_argument(segment_l2norm, device: str) -> None:
    src, indptr = segments(device, torch.float32, [2, 0, 3], (4,))
    op = "example::segment_l2norm"
    cases = [
        ((src.half(), indptr), RuntimeError, f"{op}: argument 'src' has unsupported dtype Half"),
        ((src, indptr.int()), RuntimeError, f"{op}: argument 'indptr' must be an int64 tensor, got Int"),
        ((src[0, 0], indptr), RuntimeError, f"{op}: argument 'src' must have at least one dimension"),
        ((src, indptr.view(1, -1)), RuntimeError, rf"{op}: argument 'indptr' must be 1-D \[N \+ 1\]"),
        ((src, indptr[:0]), RuntimeError, rf"{op}: argument 'indptr' must be 1-D \[N \+ 1\] with N >= 0, got shape \[0\]"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            segment_l2norm(*args)


def test_segment_l2norm_bad_indptr_raises_on_cpu(segment_l2norm) -> None:
    src = torch.randn(5, 2)
    op = "example::segment_l2norm"
    cases = {
        (1, 3, 5): f"{op}: argument 'indptr' must start at 0, got 1",
        (0, 3, 2, 5): f"{op}: argument 'indptr' must not decrease",
        (0, 3, 4): rf"{op}: argument 'indptr' must end at src.size\(0\) \(5\), got 4",
        (0, 3, 6): rf"{op}: argument 'indptr' must end at src.size\(0\) \(5\), got 6",
    }
    for indptr, message in cases.items():
        with pytest.raises(IndexError, match=message):
            segment_l2norm(src, torch.tensor(indptr))


def test_segment_l2norm_cuda_indptr(segment_l2norm, cuda_device: str) -> None:
    """Outside checked mode indptr's values are clamped into [0, E], nothing is
    read out of bounds; in checked mode a bad one raises as on the CPU."""
    src = torch.randn(5, 2, device=cuda_device)
    indptr = torch.tensor([0, 3, 9], device=cuda_device)
    with torchplug.checked(False):
        out = segment_l2norm(src, indptr)
    torch.testing.assert_close(out, l2_reference(src, torch.tensor([0, 3, 5], device=cuda_device)))
    with torchplug.checked(True), pytest.raises(IndexError, match="example::segment_l2norm: argument 'indptr'"):
        segment_l2norm(src, indptr)


def test_segment_l2norm_mixed_devices(segment_l2norm, cuda_device: str) -> None:
    src, indptr = segments(cuda_device, torch.float32, [2, 3], (2,))
    with pytest.raises(RuntimeError, match="example::segment_l2norm: expected all tensors on one device, .* argument 'indptr'"):
        segment_l2norm(src, indptr.cpu())


# ------------------------------------------------------------------ bench


def test_bench_runs(prefix: Path) -> None:
    """bench.py at tiny sizes, on the CPU: every workload runs and its outputs
    match the PyTorch alternative's."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, str(HERE / "bench.py"), "--device", "cpu", "--nodes", "300",
                             "--edges", "2000", "--repeats", "2"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "edge_dot" in result.stdout and "segment_l2norm" in result.stdout
    assert "WRONG" not in result.stdout, result.stdout


# ------------------------------------------------------------------ C++ consumer


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")
def test_cpp_consumer(prefix: Path, tmp_path: Path) -> None:
    """consumer/: find_package(example), links example::example, checks the
    C++ API under autograd against libtorch."""
    build = tmp_path / "build"
    prefix_path = ";".join([str(prefix), torchplug.cmake_prefix_path, torch.utils.cmake_prefix_path])
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = [
        ["cmake", "-S", str(HERE / "consumer"), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_PREFIX_PATH={prefix_path}"],
        ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)],
        [str(build / "main")],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        assert result.returncode == 0, f"{' '.join(step)}:\n{result.stdout[-4000:]}{result.stderr[-4000:]}"
    assert result.stdout.startswith("ok: example::edge_dot")


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")
def test_package_refuses_another_major_version(prefix: Path, tmp_path: Path) -> None:
    """The installed package carries the project's VERSION (0.1.0): asking
    for 1.0 fails at configure time, naming the package."""
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(wants_v1 LANGUAGES CXX)\nfind_package(example 1.0 REQUIRED)\n")
    prefix_path = ";".join([str(prefix), torchplug.cmake_prefix_path, torch.utils.cmake_prefix_path])
    result = subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(tmp_path / "build"),
                             f"-DCMAKE_PREFIX_PATH={prefix_path}"], capture_output=True, text=True)
    assert result.returncode != 0
    assert "example" in result.stderr and "0.1.0" in result.stderr, result.stderr[-2000:]
