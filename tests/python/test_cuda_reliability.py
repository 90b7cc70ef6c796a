"""CUDA reliability: bad indices, checked mode, devices and streams, sizes past 2^31.

Every test here needs a GPU and is skipped without one; the multi-GPU tests need
two, the size tests about 40 GB of free device memory.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torchplug

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def free_gib() -> float:
    return torch.cuda.mem_get_info()[0] / 2**30 if torch.cuda.is_available() else 0.0


@pytest.fixture
def checks_off():
    with torchplug.checked(False):
        yield


@pytest.fixture
def checks_on():
    with torchplug.checked(True):
        yield


def bad_index(E: int, N: int) -> torch.Tensor:
    index = torch.randint(0, N, (E,), device="cuda")
    index[3] = N + 7
    index[11] = -1
    index[E - 1] = N
    return index


@pytest.mark.parametrize("F", [1, 16, 64])
@pytest.mark.parametrize("order", ["random", "sorted"])
def test_out_of_range_skipped_and_context_survives(checks_off, F: int, order: str) -> None:
    torch.manual_seed(0)
    E, N = 4096, 100
    index = bad_index(E, N)
    if order == "sorted":
        index = index.sort().values
    src = torch.randn(E, F, device="cuda", dtype=torch.float64, requires_grad=True)
    out = torchplug.scatter_sum(src, index, 0, dim_size=N)
    keep = (index >= 0) & (index < N)
    want = torch.zeros(N, F, device="cuda", dtype=torch.float64).index_add_(
        0, index[keep], src.detach()[keep]
    )
    torch.testing.assert_close(out, want)
    grad = torch.randn_like(out)
    out.backward(grad)
    want_grad = torch.zeros_like(src)
    want_grad[keep] = grad[index[keep]]
    torch.testing.assert_close(src.grad, want_grad, rtol=0, atol=0)
    torch.cuda.synchronize()  # a poisoned context would raise here
    assert torch.ones(3, device="cuda").sum().item() == 3


@pytest.mark.parametrize("order", ["sorted", "shuffled"])
@pytest.mark.parametrize("E", [5000, 300_000], ids=["small", "large"])
@pytest.mark.parametrize("F", [8, 12, 32], ids=["narrow", "no-hot-row", "wide"])
def test_1d_index_path_never_synchronises(checks_off, order: str, E: int, F: int) -> None:
    # With dim_size given and checked mode off, a 1-D index with rows of
    # several values never waits: the atomic rows (by default every case here
    # but the large one of rows of 12) are one launch; the CSR (and every case
    # under TORCHPLUG_SCATTER_ATOMIC_LIMIT=0, as scripts/gpu_check.sh runs this
    # file a second time) queues every kernel and picks on the device: sorted
    # or not (narrow rows: the atomic rows when not), a row past 1024 sources
    # or not. Any synchronisation raises here.
    torch.manual_seed(4)
    index = torch.randint(0, 100, (E,), device="cuda")
    index[: 2 * E // 5] = 3
    if order == "sorted":
        index = index.sort().values
    src = torch.randint(-3, 4, (E, F), device="cuda").float()
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = torchplug.scatter_sum(src, index, 0, dim_size=100)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    want = torch.zeros(100, F, device="cuda").index_add_(0, index, src)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hot_row_with_out_of_range_values(checks_off, dtype: torch.dtype) -> None:
    # A row with more than 1024 sources takes the long-row kernels (under
    # TORCHPLUG_SCATTER_ATOMIC_LIMIT=0, as scripts/gpu_check.sh runs this file
    # a second time; by default this size takes the atomic rows, and so do
    # float32's rows of 64 bytes once the index is found unsorted); out-of-range
    # values leave the permutation shorter than E, and the first call leaves a
    # fully written permutation in the allocator's cache for the second to reuse.
    # Small integer values keep every sum exact in either dtype, so the check is
    # exact whatever the summation order and a source added twice cannot hide.
    torch.manual_seed(3)
    E, N, F = 20000, 50, 16
    index = torch.randint(0, N, (E,), device="cuda")
    index[:5000] = 7
    index = index[torch.randperm(E, device="cuda")]
    src = torch.randint(-8, 9, (E, F), device="cuda").to(dtype)
    torchplug.scatter_sum(src, index, 0, dim_size=N)
    bad = index.clone()
    bad[::97], bad[5::101] = -1, N
    out = torchplug.scatter_sum(src, bad, 0, dim_size=N)
    keep = (bad >= 0) & (bad < N)
    want = torch.zeros(N, F, device="cuda", dtype=dtype).index_add_(0, bad[keep], src[keep])
    torch.testing.assert_close(out, want, rtol=0, atol=0)


def test_checked_mode_raises_before_writing(checks_on) -> None:
    E, N = 1000, 50
    index = bad_index(E, N)
    src = torch.randn(E, 8, device="cuda")
    out = torch.randn(N, 8, device="cuda")
    before = out.clone()
    with pytest.raises(IndexError, match=r"torchplug::scatter_sum.*'index'"):
        torchplug.scatter_sum(src, index, 0, out=out)
    torch.testing.assert_close(out, before, rtol=0, atol=0)
    with pytest.raises(IndexError, match=r"torchplug::scatter_sum.*'index'"):
        torchplug.scatter_sum(src, index, 0, dim_size=N)
    good = index.clamp(0, N - 1)
    torch.testing.assert_close(
        torchplug.scatter_sum(src, good, 0, dim_size=N),
        torch.zeros(N, 8, device="cuda").index_add_(0, good, src),
    )


def test_checked_mode_from_environment() -> None:
    code = "import torchplug; print(torchplug.checks_enabled())"
    for value, expected in [("1", "True"), ("0", "False")]:
        env = dict(os.environ, TORCHPLUG_CHECKS=value)
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == expected


@two_gpus
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_second_device_matches_first(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    src0 = torch.randn(20000, 32, device="cuda:0").to(dtype)
    index0 = torch.randint(0, 500, (20000,), device="cuda:0")
    a0, b0 = torch.randn(1001, 7, device="cuda:0"), torch.randn(7, device="cuda:0")
    src1, index1, a1, b1 = (t.to("cuda:1") for t in (src0, index0, a0, b0))
    with torch.cuda.device(0):  # the current device is not the inputs' device
        out1 = torchplug.scatter_sum(src1, index1, 0, dim_size=500)
        sum1 = torchplug.add(a1, b1)
    assert out1.device == torch.device("cuda:1") and sum1.device == torch.device("cuda:1")
    out0 = torchplug.scatter_sum(src0, index0, 0, dim_size=500)
    torch.testing.assert_close(out1.cpu(), out0.cpu())
    torch.testing.assert_close(sum1.cpu(), torchplug.add(a0, b0).cpu(), rtol=0, atol=0)


@two_gpus
def test_inputs_on_two_gpus_rejected() -> None:
    src = torch.randn(10, 4, device="cuda:0")
    index = torch.zeros(10, dtype=torch.long, device="cuda:1")
    with pytest.raises(RuntimeError, match=r"torchplug::scatter_sum: .*'src' is on cuda:0 .*'index' is on cuda:1"):
        torchplug.scatter_sum(src, index, 0, dim_size=3)
    with pytest.raises(RuntimeError, match=r"torchplug::scatter_sum: .*'out' is on cuda:1"):
        torchplug.scatter_sum(src, index.to("cuda:0"), 0, out=torch.zeros(3, 4, device="cuda:1"))
    with pytest.raises(RuntimeError, match=r"torchplug::add: .*'a' is on cuda:0 .*'b' is on cuda:1"):
        torchplug.add(src, torch.randn(4, device="cuda:1"))


@pytest.mark.parametrize("device_index", [0, 1])
def test_non_default_stream(device_index: int) -> None:
    if device_index >= torch.cuda.device_count():
        pytest.skip("needs two CUDA devices")
    device = torch.device("cuda", device_index)
    torch.manual_seed(2)
    src = torch.randn(200000, 16, device=device)
    index = torch.randint(0, 3000, (200000,), device=device)
    a, b = torch.randn(1 << 20, device=device), torch.randn(1 << 20, device=device)
    want = torch.zeros(3000, 16, device=device).index_add_(0, index, src)
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        out = torchplug.scatter_sum(src, index, 0, dim_size=3000)
        total = torchplug.add(a, b)
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(total, a + b, rtol=0, atol=0)


@pytest.mark.skipif(free_gib() < 40, reason="needs about 40 GB of free device memory")
def test_src_past_two_to_the_31_elements() -> None:
    torch.manual_seed(3)
    E, F, N = (1 << 27) + 3, 16, 4099  # 2^31 + 48 elements
    src = torch.rand(E, F, device="cuda").sub_(0.5)
    index = torch.randint(0, N, (E,), device="cuda")
    got = torchplug.scatter_sum(src, index, 0, dim_size=N)
    want = torch.zeros(N, F, device="cuda").index_add_(0, index, src)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-2)
    del got, want
    # Rows of 32 values (2^31 + 32 elements): the permutation and its gather,
    # where rows of 16 with a random index take the atomic rows.
    wide = src[:-1].view(-1, 32)
    wide_index = torch.randint(0, N, (wide.shape[0],), device="cuda")
    got = torchplug.scatter_sum(wide, wide_index, 0, dim_size=N)
    want = torch.zeros(N, 32, device="cuda").index_add_(0, wide_index, wide)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-2)
    del got, want, wide_index
    flat = src.view(-1)
    flat_index = torch.randint(0, N, (flat.numel(),), device="cuda")
    got = torchplug.scatter_sum(flat, flat_index, 0, dim_size=N)
    want = torch.zeros(N, device="cuda").index_add_(0, flat_index, flat)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-1)
    del flat_index
    a = src.view(-1)
    total = torchplug.add(a, a)
    assert total.numel() > 2**31
    torch.testing.assert_close(total[-1000:], 2 * a[-1000:], rtol=0, atol=0)
    torch.testing.assert_close(total[:1000], 2 * a[:1000], rtol=0, atol=0)


@pytest.mark.skipif(free_gib() < 40, reason="needs about 40 GB of free device memory")
def test_index_values_past_two_to_the_31() -> None:
    N = (1 << 31) + 100
    index = torch.tensor([0, N - 1, (1 << 31) + 5, N - 1, 1 << 31], device="cuda")
    src = torch.arange(1.0, 6.0, device="cuda")
    got = torchplug.scatter_sum(src, index, 0)
    assert got.numel() == N
    assert got[N - 1].item() == 2.0 + 4.0
    assert got[(1 << 31) + 5].item() == 3.0
    assert got[1 << 31].item() == 5.0
    assert got[0].item() == 1.0
    assert got.sum().item() == 15.0
    wide = torchplug.scatter_sum(src.view(5, 1).expand(5, 4).contiguous(), index, 0)
    assert wide.shape == (N, 4)
    assert wide[N - 1].tolist() == [6.0] * 4
