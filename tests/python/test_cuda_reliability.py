"""CUDA reliability: bad indices, checked mode, devices and streams, sizes past
2^31, deterministic mode. The cases that hold for every op run over the op
table (op_table.py); scatter_sum's own strategies keep their cases.

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
from op_table import OpRow, Sample, rows_param, values
from scatter_reference import Reduced, assert_reduced_close, reduce_grad_reference, reduce_reference
from scatter_rows import scatter_rows_param

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def free_gib() -> float:
    return torch.cuda.mem_get_info()[0] / 2**30 if torch.cuda.is_available() else 0.0


def large_memory(test):
    """Marks a test that takes about 40 GB of device memory: two at once would
    not fit, so scripts/gpu_check.sh runs these one at a time after its
    parallel pass."""
    needs = pytest.mark.skipif(free_gib() < 40, reason="needs about 40 GB of free device memory")
    return pytest.mark.large_memory(needs(test))


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
@pytest.mark.parametrize("row", scatter_rows_param())
def test_out_of_range_skipped_and_context_survives(checks_off, row: OpRow, F: int, order: str) -> None:
    """Without checked mode bad index values are skipped: the values and args
    are those of the sources that remain, their gradient is zero, and the
    CUDA context stays usable."""
    torch.manual_seed(0)
    E, N = 4096, 100
    index = bad_index(E, N)
    if order == "sorted":
        index = index.sort().values
    g = torch.Generator().manual_seed(0)
    # mul without zero factors: with about 40 factors a slot, zeros would
    # leave nearly every product (and its gradient) 0.
    src = values((E, F), torch.float64, row.reduce, g, zeros=False).cuda().requires_grad_()
    outputs = row.call(Sample((src, index), 0, N))
    keep = (index >= 0) & (index < N)
    keep_full = keep.view(E, 1).expand(E, F)
    ref = reduce_reference(src.detach(), index, 0, row.reduce, N, keep=keep_full)
    assert_reduced_close(outputs[0].cpu(), _cpu(ref), row.reduce, torch.float64, "skipped values")
    for position in row.args:
        torch.testing.assert_close(outputs[position], ref.arg, rtol=0, atol=0)
    grad = torch.randn_like(outputs[0])
    (got,) = torch.autograd.grad(outputs[0], (src,), grad)
    kept_grad, _ = reduce_grad_reference(src.detach()[keep], index[keep], 0, row.reduce, grad, dim_size=N)
    want_grad = torch.zeros_like(src)
    want_grad[keep] = kept_grad
    exact = row.reduce in ("sum", "min", "max")  # gathers: no arithmetic
    torch.testing.assert_close(got, want_grad, rtol=0 if exact else 1e-12, atol=0 if exact else 1e-12)
    torch.cuda.synchronize()  # a poisoned context would raise here
    assert torch.ones(3, device="cuda").sum().item() == 3


def _cpu(ref: Reduced) -> Reduced:
    return Reduced(*(None if t is None else t.cpu() for t in (ref.value, ref.arg, ref.count, ref.terms, ref.mag)))


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


@pytest.mark.parametrize("row", scatter_rows_param())
def test_checked_mode_raises_before_writing(checks_on, row: OpRow) -> None:
    E, N = 1000, 50
    index = bad_index(E, N)
    src = torch.randn(E, 8, device="cuda")
    out = torch.randn(N, 8, device="cuda")
    before = out.clone()
    with pytest.raises(IndexError, match=rf"torchplug::{row.name}.*'index'"):
        row.fn()(src, index, 0, out=out)
    torch.testing.assert_close(out, before, rtol=0, atol=0)
    with pytest.raises(IndexError, match=rf"torchplug::{row.name}.*'index'"):
        row.fn()(src, index, 0, dim_size=N)
    good = Sample((src, index.clamp(0, N - 1)), 0, N)
    row.check(row.call(good), good)


# A CUDA call with an out-of-range index in a fresh process: prints "raised"
# when it raises IndexError, "skipped" when it returns.
_ENV_PROBE = """
import torch, torchplug
src = torch.ones(6, 2, device="cuda")
index = torch.tensor([0, 1, 9, 2, 0, 1], device="cuda")
try:
    out = torchplug.{name}(src, index, 0, dim_size=3)
    torch.cuda.synchronize()
    print("skipped")
except IndexError:
    print("raised")
"""


@pytest.mark.parametrize("value, expected", [("1", "raised"), ("true", "raised"), ("On", "raised"),
                                             ("0", "skipped"), ("false", "skipped"), ("NO", "skipped")])
@pytest.mark.parametrize("row", scatter_rows_param())
def test_checked_mode_from_environment(row: OpRow, value: str, expected: str) -> None:
    """TORCHPLUG_CHECKS is a boolean: false leaves checked mode off (the bad
    value is skipped), true turns it on (the call raises)."""
    env = dict(os.environ, TORCHPLUG_CHECKS=value)
    result = subprocess.run([sys.executable, "-c", _ENV_PROBE.format(name=row.name)], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def _large_sample(row: OpRow, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                  N: int = 500) -> Sample:
    """OpRow.large_sample: big enough for every CUDA strategy's parallel paths."""
    return row.large_sample(dtype, device, seed, E, F, N)


def _moved(sample: Sample, device) -> Sample:
    out = None if sample.out is None else sample.out.to(device)
    return Sample(tuple(t.to(device) for t in sample.inputs), sample.dim, sample.dim_size, out, sample.desc)


@two_gpus
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("row", rows_param())
def test_second_device_matches_first(row: OpRow, dtype: torch.dtype) -> None:
    """Every op on cuda:1 while cuda:0 is current: results on cuda:1, equal to
    cuda:0's (args exactly), and right against the reference."""
    samples = [_large_sample(row, dtype, "cuda:0", 1)] + row.samples("cuda:0", dtype, seed=1)
    for sample0 in samples:
        sample1 = _moved(sample0, "cuda:1")
        with torch.cuda.device(0):  # the current device is not the inputs' device
            got1 = row.call(sample1)
        got0 = row.call(sample0)
        assert len(got1) == len(got0)
        for position, (a, b) in enumerate(zip(got1, got0)):
            assert a.device == torch.device("cuda:1"), sample0
            exact = row.bitwise_repeatable or position in row.args or not a.dtype.is_floating_point
            torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0 if exact else None, atol=0 if exact else None,
                                       equal_nan=True)
        row.check(got1, sample1)


@two_gpus
@pytest.mark.parametrize("row", scatter_rows_param())
def test_inputs_on_two_gpus_rejected(row: OpRow) -> None:
    name = row.name
    src = torch.randn(10, 4, device="cuda:0")
    index = torch.zeros(10, dtype=torch.long, device="cuda:1")
    with pytest.raises(RuntimeError, match=rf"torchplug::{name}: .*'src' is on cuda:0 .*'index' is on cuda:1"):
        row.fn()(src, index, 0, dim_size=3)
    with pytest.raises(RuntimeError, match=rf"torchplug::{name}: .*'out' is on cuda:1"):
        row.fn()(src, index.to("cuda:0"), 0, out=torch.zeros(3, 4, device="cuda:1"))


@two_gpus
def test_add_inputs_on_two_gpus_rejected() -> None:
    src = torch.randn(10, 4, device="cuda:0")
    with pytest.raises(RuntimeError, match=r"torchplug::add: .*'a' is on cuda:0 .*'b' is on cuda:1"):
        torchplug.add(src, torch.randn(4, device="cuda:1"))


@pytest.mark.parametrize("device_index", [0, 1])
@pytest.mark.parametrize("row", rows_param())
def test_non_default_stream(row: OpRow, device_index: int) -> None:
    """The op runs on the current stream. The inputs arrive late on the side
    stream: they hold zeros until a long sleep on that stream has passed and
    the real values are copied in, and the call follows on the same stream
    with nothing else waiting. A kernel launched on the default stream
    instead would run at once, on the zeros, and give a wrong result (the
    default stream waits for the side stream only after the call)."""
    if device_index >= torch.cuda.device_count():
        pytest.skip("needs two CUDA devices")
    device = torch.device("cuda", device_index)
    truth = _large_sample(row, torch.float32, device, 2, E=200000, F=16, N=3000)
    late = tuple(torch.zeros_like(t) for t in truth.inputs)  # zeros, ready on the default stream
    torch.cuda.synchronize(device)
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.device(device), torch.cuda.stream(stream):
        torch.cuda._sleep(1 << 30)  # about half a second or more on any recent GPU
        for t, v in zip(late, truth.inputs):
            t.copy_(v, non_blocking=True)
        got = row.call(Sample(late, truth.dim, truth.dim_size))
    torch.cuda.current_stream(device).wait_stream(stream)
    for t in late + got:
        t.record_stream(torch.cuda.current_stream(device))
    torch.cuda.synchronize(device)
    row.check(got, truth, "on a side stream")


@pytest.mark.parametrize("F", [1, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("row", scatter_rows_param())
def test_deterministic_mode_is_bitwise_repeatable(row: OpRow, F: int, dtype: torch.dtype) -> None:
    """Under torch.use_deterministic_algorithms(True) every reduction gives the
    same bits on five runs (E=200K, random index; values and args), with and
    without out=, instead of raising or varying."""
    torch.manual_seed(5)
    E, N = 200_000, 1000
    g = torch.Generator().manual_seed(5)
    src = values((E, F), dtype, row.reduce, g, zeros=False).cuda()
    if row.reduce != "mul":
        src = src * 1000  # sums whose rounding depends on the order
    index = torch.randint(0, N, (E,), device="cuda")
    base = values((N, F), dtype, row.reduce, g).cuda()
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = []
        for _ in range(5):
            out = base.clone()
            runs.append(row.call(Sample((src, index), 0, N)) + row.call(Sample((src, index), 0, None, base), out=out))
        torch.cuda.synchronize()
    finally:
        torch.use_deterministic_algorithms(before)
    first = runs[0]
    row.check(first[: 1 + len(row.args)], Sample((src, index), 0, N))
    for run in runs[1:]:
        for a, b in zip(run, first):
            assert torch.equal(_bits(a), _bits(b)), "runs differ bitwise"


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers (NaN payloads and the sign of zero count)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@large_memory
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


@large_memory
def test_segments_and_gathers_past_two_to_the_31_elements() -> None:
    """segment_csr and segment_coo over 2^31 + 48 float32 elements (rows of 16),
    the gathers writing as many, and a flat segment_csr over 2^31 positions
    (the 64-bit offsets of the indptr plan, and args past 2^31)."""
    torch.manual_seed(4)
    E, F, N = (1 << 27) + 3, 16, 4099
    src = torch.rand(E, F, device="cuda").sub_(0.5)
    index = torch.randint(0, N, (E,), device="cuda").sort().values
    indptr = torch.cat([index.new_zeros(1), torch.bincount(index, minlength=N).cumsum(0)])
    want = torch.zeros(N, F, device="cuda").index_add_(0, index, src)
    for got in (torchplug.segment_sum_csr(src, indptr), torchplug.segment_sum_coo(src, index, dim_size=N)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-2)
    del got, want
    rows = torch.randn(N, F, device="cuda")
    for spread in (torchplug.gather_csr(rows, indptr), torchplug.gather_coo(rows, index)):
        assert spread.numel() > 2**31
        for part in (slice(0, 1000), slice(E - 1000, E)):
            torch.testing.assert_close(spread[part], rows[index[part]], rtol=0, atol=0)
        del spread
    del index, rows
    segments, length = 1 << 20, 1 << 11  # 2^31 positions
    flat = src.view(-1)[: segments * length]
    flat_indptr = torch.arange(segments + 1, device="cuda") * length
    got = torchplug.segment_sum_csr(flat, flat_indptr)
    torch.testing.assert_close(got.double(), flat.view(segments, length).sum(1, dtype=torch.float64),
                               rtol=1e-4, atol=1e-3)
    values, arg = torchplug.segment_max_csr(flat, flat_indptr)
    assert torch.equal(values, flat.view(segments, length).amax(1))
    assert arg[-1].item() >= (1 << 31) - length and torch.equal(flat[arg], values)


@large_memory
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


@large_memory
@pytest.mark.parametrize("row", scatter_rows_param())
def test_every_reduction_past_two_to_the_31_elements(row: OpRow) -> None:
    """src of 2^31 + 48 float32 elements along rows of 16 and flat, for every
    reduction, against index_add_ / index_reduce_ over chunks on the same
    device (_chunked_reference: no index of src's shape, no reference call
    past 2^31 elements). Small integer values (mul: +-1) keep every
    result exact whatever the order; for min/max the args point at a source
    holding the result, and at src.size(dim) only in empty slots."""
    torch.manual_seed(6)
    E, F, N = (1 << 27) + 3, 16, 4099
    if row.reduce == "mul":
        src = torch.randint(0, 2, (E, F), device="cuda", dtype=torch.int8).float().mul_(2).sub_(1)
    else:
        src = torch.randint(-8, 9, (E, F), device="cuda", dtype=torch.int8).float()
    index = torch.randint(0, N - 1, (E,), device="cuda")  # slot N - 1 stays empty
    for s, i in ((src, index), (src.view(-1), torch.randint(0, N - 1, (src.numel(),), device="cuda"))):
        torch.cuda.empty_cache()
        outputs = row.call(Sample((s, i), 0, N))
        want = _chunked_reference(row.reduce, s, i, N)
        # mean: the exact sum over the count, rounded once (a kernel may
        # divide or multiply by the reciprocal: one ulp either way).
        rtol = 2.0**-23 if row.reduce == "mean" else 0
        torch.testing.assert_close(outputs[0], want, rtol=rtol, atol=0)
        for position in row.args:
            arg = outputs[position]
            assert arg.shape == want.shape and arg.dtype == torch.int64
            empty = arg == s.size(0)
            assert bool(empty.select(0, N - 1).all()) and int(empty.sum()) == empty.select(0, N - 1).numel()
            held = s.gather(0, arg.clamp(max=s.size(0) - 1)) if s.dim() > 1 else s[arg.clamp(max=s.size(0) - 1)]
            assert torch.equal(torch.where(empty, want, held), want)
            assert torch.equal(i[arg[:-1].reshape(-1) if s.dim() == 1 else arg[:-1, 0]],
                               torch.arange(N - 1, device="cuda"))
        del outputs, want


def _chunked_reference(reduce: str, s: torch.Tensor, i: torch.Tensor, N: int) -> torch.Tensor:
    """index_add_ / index_reduce_ over chunks of 2^24 sources (no reference
    call sees 2^31 elements): sums and counts in float64, min/max/prod from
    their identity with include_self, empty slots set to 0 (mul: 1) after."""
    shape = (N,) + tuple(s.shape[1:])
    total = torch.zeros(shape, device="cuda", dtype=torch.float64)
    count = torch.zeros(N, device="cuda", dtype=torch.float64)
    identity = {"min": float("inf"), "max": float("-inf"), "mul": 1.0}.get(reduce, 0.0)
    acc = torch.full(shape, identity, device="cuda")
    op = {"min": "amin", "max": "amax", "mul": "prod"}.get(reduce)
    chunk = 1 << 24
    for begin in range(0, s.size(0), chunk):
        part, part_index = s[begin:begin + chunk], i[begin:begin + chunk]
        count.index_add_(0, part_index, torch.ones_like(part_index, dtype=torch.float64))
        if op is None:
            total.index_add_(0, part_index, part.double())
        else:
            acc.index_reduce_(0, part_index, part, op, include_self=True)
    empty = (count == 0).view((N,) + (1,) * (s.dim() - 1))
    if reduce == "sum":
        return total.float()
    if reduce == "mean":
        return (total / count.clamp(min=1).view(empty.shape)).float()
    return torch.where(empty, torch.full_like(acc, 1.0 if reduce == "mul" else 0.0), acc)


@large_memory
def test_composites_past_two_to_the_31_elements() -> None:
    """logsumexp, std and softmax over 2^31 + 48 float32 elements, in rows of
    16 and flat (64-bit offsets), every group far past the long-row limit
    (one block per group), against references in float64 over chunks of the
    same device (no reference call sees 2^31 elements)."""
    torch.manual_seed(7)
    E, F, N = (1 << 27) + 3, 16, 4099
    src = torch.rand(E, F, device="cuda").sub_(0.5).mul_(8)
    chunk = 1 << 24
    for s in (src, src.view(-1)):
        i = torch.randint(0, N, (s.size(0),), device="cuda")
        shape = (N,) + tuple(s.shape[1:])
        top = torch.full(shape, float("-inf"), device="cuda")
        count = torch.zeros(N, device="cuda", dtype=torch.float64)
        total = torch.zeros(shape, device="cuda", dtype=torch.float64)
        for begin in range(0, s.size(0), chunk):
            part, part_index = s[begin:begin + chunk], i[begin:begin + chunk]
            top.index_reduce_(0, part_index, part, "amax", include_self=True)
            count.index_add_(0, part_index, torch.ones_like(part_index, dtype=torch.float64))
            total.index_add_(0, part_index, part.double())
        members = count.view((N,) + (1,) * (s.dim() - 1))
        mean = total / members
        exp_sum = torch.zeros(shape, device="cuda", dtype=torch.float64)
        squares = torch.zeros(shape, device="cuda", dtype=torch.float64)
        for begin in range(0, s.size(0), chunk):
            part, part_index = s[begin:begin + chunk].double(), i[begin:begin + chunk]
            exp_sum.index_add_(0, part_index, (part - top[part_index]).exp())
            squares.index_add_(0, part_index, (part - mean[part_index]).square())
        lse = top.double() + exp_sum.log()
        torch.testing.assert_close(torchplug.scatter_logsumexp(s, i, 0, dim_size=N).double(), lse,
                                   rtol=1e-5, atol=1e-5)
        std = (squares / (members - 1)).sqrt()
        torch.testing.assert_close(torchplug.scatter_std(s, i, 0, dim_size=N).double(), std, rtol=1e-4, atol=1e-5)
        torch.cuda.empty_cache()
        out = torchplug.scatter_softmax(s, i, 0, N)
        assert out.numel() == s.numel()
        for part in (slice(0, 1000), slice(s.size(0) - 1000, s.size(0))):
            want = (s[part].double() - lse[i[part]]).exp()
            torch.testing.assert_close(out[part].double(), want, rtol=1e-4, atol=1e-9)
        del out, i, top, count, total, mean, exp_sum, squares
        torch.cuda.empty_cache()


@large_memory
def test_spmm_past_two_to_the_31_elements() -> None:
    """spmm (every reduction), both gradients of the sum (x's through the
    transpose, value's through sddmm) over x and out of 2^31 + 48 float32
    elements (N = 2^27 + 3 rows of 16; the last rows, whose offsets pass 2^31,
    gather the last columns), against index_add_ / index_reduce_ over chunks of
    edges on the same device (no reference call sees 2^31 elements). Small
    integers keep every sum exact whatever the order; the last row has no
    edges."""
    torch.manual_seed(8)
    N, F, tail = (1 << 27) + 3, 16, 3000
    row = torch.cat([torch.randint(0, N - 4, ((1 << 27) - tail,), device="cuda").sort().values,
                     torch.arange(tail, device="cuda") // (tail // 3) + N - 4])
    col = torch.cat([torch.randint(0, N, ((1 << 27) - tail,), device="cuda"),
                     N - 1 - torch.arange(tail, device="cuda") % 3])
    rowptr = torch.cat([row.new_zeros(1), torch.bincount(row, minlength=N).cumsum(0)])
    value = torch.randint(-2, 3, (row.numel(),), device="cuda", dtype=torch.int8).float()
    x = torch.randint(-8, 9, (N, F), device="cuda", dtype=torch.int8).float()
    chunks = [slice(begin, begin + (1 << 24)) for begin in range(0, row.numel(), 1 << 24)]
    count = rowptr.diff().view(-1, 1)

    def reference(reduce: str) -> torch.Tensor:
        identity = {"min": float("inf"), "max": float("-inf")}.get(reduce, 0.0)
        out = torch.full((N, F), identity, device="cuda")
        for part in chunks:
            messages = value[part].view(-1, 1) * x[col[part]]
            if reduce in ("sum", "mean"):
                out.index_add_(0, row[part], messages)
            else:
                out.index_reduce_(0, row[part], messages, "a" + reduce, include_self=True)
        if reduce == "mean":
            return out.div_(count.clamp(min=1))
        return out if reduce == "sum" else out.masked_fill_(count == 0, 0.0)

    for reduce in ("sum", "mean", "min", "max"):
        torch.cuda.empty_cache()
        got = getattr(torchplug, f"spmm_{reduce}")(rowptr, col, value, x)
        out = got[0] if isinstance(got, tuple) else got
        # mean: the exact sum over the count, rounded once (one ulp either way).
        torch.testing.assert_close(out, reference(reduce), rtol=2.0**-23 if reduce == "mean" else 0, atol=0,
                                   msg=lambda m: f"spmm_{reduce}: {m}")
        if isinstance(got, tuple):  # the last rows' args name an edge of the row holding the result
            arg, last = got[1][-4:], slice(N - 4, N)
            assert torch.equal(arg[-1], torch.full_like(arg[-1], row.numel()))
            held = value[arg[:-1]] * x[col[arg[:-1]], torch.arange(F, device="cuda")]
            assert torch.equal(held, out[last][:-1])
            assert bool(((arg[:-1] >= rowptr[N - 4:N - 1, None]) & (arg[:-1] < rowptr[N - 3:N, None])).all())
        del got, out
    torch.cuda.empty_cache()
    leaves = (x.requires_grad_(), value.requires_grad_())
    grad = torch.randint(-3, 4, (N, F), device="cuda", dtype=torch.int8).float()
    grad_x, grad_value = torch.autograd.grad(torchplug.spmm_sum(rowptr, col, value, x), leaves, grad)
    want_x = torch.zeros(N, F, device="cuda")
    want_value = torch.empty_like(value, requires_grad=False)
    with torch.no_grad():
        for part in chunks:
            want_x.index_add_(0, col[part], value[part].view(-1, 1) * grad[row[part]])
            want_value[part] = (grad[row[part]] * x[col[part]]).sum(1)
    torch.testing.assert_close(grad_x, want_x, rtol=0, atol=0)
    torch.testing.assert_close(grad_value, want_value, rtol=0, atol=0)
