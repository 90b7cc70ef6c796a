"""The ops called from 8 Python threads at once give the same results as the
same calls made one by one.

torch.ops calls release the GIL, so the kernels really overlap: several
threads inside torchplug's CPU kernels at once (each of which may itself fan
out over the cores with at::parallel_for), and on CUDA several host threads
launching on their own streams.

Every thread gets its own seeded inputs; the inputs rotate between threads
from one iteration to the next, and a barrier starts each round's calls
together. Results are compared with ``assert_same_result`` (conftest.py):
bit for bit on the CPU, whose kernels are deterministic and race-free; on
CUDA, float sums are added with atomics in an order that varies from run to
run, so floats agree to assert_close's default tolerance (integers exactly).

On CUDA each thread issues its work on a stream of its own (inputs are made
on the default stream and synchronised before the threads start; each
thread synchronises its stream before handing results back).
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest
import torch

import torchplug
from op_table import OpRow, Sample, randint as _randint, randn as _randn, rows_param, values
from scatter_rows import SCATTER_ROWS, scatter_rows_param

THREADS = 8
ITERATIONS = 10
BARRIER_TIMEOUT_S = 120

# Sizes: past the CPU scatter kernel's serial cutoff (2**15 source elements)
# and add's TensorIterator grain (2**15), so the parallel schedules run too.
E, F = 12_000, 4  # 48k source elements
N_FEW = 300  # N * 4 <= E: per-thread private outputs
N_MANY = 9_000  # N * 4 > E: each thread owns a range of output rows


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _stream_context(device: str):
    """A fresh CUDA stream made current for the calling thread (CPU: nothing)."""
    if device.startswith("cuda"):
        return torch.cuda.stream(torch.cuda.Stream())
    return contextlib.nullcontext()


def _finish(device: str) -> None:
    """Wait for the calling thread's current stream before its results are read."""
    if device.startswith("cuda"):
        torch.cuda.current_stream().synchronize()


def run_concurrently(
    device: str, inputs: list, work: Callable, check: Callable[[object, object], None]
) -> None:
    """Computes work(inputs[i]) for every i one by one, then ITERATIONS rounds of
    THREADS threads each computing one of them at the same time (thread t takes
    input (t + round) % THREADS), and checks every concurrent result against
    the serial one with check(actual, expected)."""
    assert len(inputs) == THREADS
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    serial = []
    for item in inputs:
        serial.append(work(item))
        _finish(device)

    barrier = threading.Barrier(THREADS, timeout=BARRIER_TIMEOUT_S)

    def worker(i: int):
        with _stream_context(device):
            barrier.wait()
            result = work(inputs[i])
            _finish(device)
        return result

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        for round_ in range(ITERATIONS):
            order = [(t + round_) % THREADS for t in range(THREADS)]
            futures = [pool.submit(worker, i) for i in order]
            for i, future in zip(order, futures):
                check(future.result(timeout=BARRIER_TIMEOUT_S * 2), serial[i])


def _check_all(assert_same_result):
    """check() for a result that is a tuple of tensors."""

    def check(actual, expected) -> None:
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.shape == e.shape and a.dtype == e.dtype and a.device == e.device
            assert_same_result(a, e)

    return check


# --------------------------------------------------------------------------- every op of the table


def _row_work(row: OpRow):
    def work(samples: list[Sample]) -> tuple:
        return tuple(o for sample in samples for o in row.call(sample))
    return work


@pytest.mark.parametrize("row", rows_param())
def test_op_from_threads(row: OpRow, device: str, assert_same_result) -> None:
    """Each op of the table from 8 threads at once agrees with the one-by-one
    calls, which are themselves right against the reference."""
    inputs = [row.thread_samples(1000 + t, device) for t in range(THREADS)]
    run_concurrently(device, inputs, _row_work(row), _check_all(assert_same_result))
    for sample in inputs[0]:
        row.check(row.call(sample), sample, "serial")


# --------------------------------------------------------------------------- CPU schedules

# ops/scatter/scatter_cpu.cpp splits a 1-D index's work by thread count and
# shape. Each case below takes one schedule at 2, 3 and 4 threads, with an odd
# E (no thread count divides it: the last chunk of entries is partial) and
# entries in the last output rows (index[0] and index[-1] are N - 1, so the last
# partial bucket or row range is used):
#  - buckets: output > 32 MiB and rows >= 128 bytes (140K rows of 64 float32,
#    36 MB; 512 rows a bucket, the last one partial)
#  - private outputs: N * 4 <= E
#  - row ownership: rows narrower than a cache line per thread
#  - balanced rows: rows of 1 KB or more (F = 256 float32)
#  - column slices with a tail: 4 lines of 16 float32 and 7 columns more
#    (F = 71, 284-byte rows, unsorted index, N * 4 > E); the last slice ends
#    at the last column, not at its last whole line
SCHEDULES = [
    pytest.param(150_001, 64, 140_000, id="buckets"),
    pytest.param(60_001, 16, 700, id="private-outputs"),
    pytest.param(50_001, 8, 40_000, id="row-ownership"),
    pytest.param(2_001, 256, 1_000, id="balanced-rows"),
    pytest.param(20_001, 71, 10_000, id="column-slices-tail"),
]


def _call_on_threads(row: OpRow, sample: Sample, threads: int) -> tuple:
    """row's call on sample with torch's CPU thread count set to `threads`."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return row.call(sample)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("E, F, N", SCHEDULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
@pytest.mark.parametrize("row", scatter_rows_param())
def test_cpu_schedules_cover_the_edges(row: OpRow, dtype: torch.dtype, E: int, F: int, N: int,
                                       threads: int) -> None:
    """Every schedule at several thread counts against the reference: a
    dropped partial chunk of entries, a dropped last bucket or row range, or
    a dropped column tail changes some slot by a whole source value, far past
    the tolerance (about one source per slot in most cases; no zeros among
    mul's factors)."""
    g = _generator(7000 + threads)
    src = values((E, F), dtype, row.reduce, g, zeros=False)
    index = torch.randint(0, N, (E,), generator=g)
    index[0] = index[-1] = N - 1
    index[E // 2] = 0
    sample = Sample((src, index), 0, N, None, f"{threads} threads")
    row.check(_call_on_threads(row, sample, threads), sample)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("E, F, N", SCHEDULES)
@pytest.mark.parametrize("row", rows_param([r for r in SCATTER_ROWS if r.args]))
def test_cpu_schedules_args_with_ties_nan_and_out(row: OpRow, E: int, F: int, N: int, threads: int) -> None:
    """min and max on every schedule: values in quarters, so that equal
    values meet in a slot from different threads' chunks and copies (the
    smallest position must win), NaNs here and there (the first one is the
    arg), and out= whose values win some slots and tie others (arg E, or the
    first source equal to out's value)."""
    g = _generator(9000 + threads)
    src = values((E, F), torch.float32, row.reduce, g, ties=True)
    src.view(-1)[::4099] = float("nan")
    index = torch.randint(0, N, (E,), generator=g)
    index[0] = index[-1] = N - 1
    out = values((N, F), torch.float32, row.reduce, g, ties=True)
    sample = Sample((src, index), 0, None, out, f"{threads} threads, out=")
    row.check(_call_on_threads(row, sample, threads), sample)


# --------------------------------------------------------------------------- scatter_sum (composed)


def _scatter_inputs(seed: int, device: str) -> dict:
    g = _generator(seed)
    return dict(
        src=_randn((E, F), torch.float32, g, device),
        few=_randint(0, N_FEW, (E,), g, device),
        out=_randn((N_FEW, F), torch.float32, g, device),
    )


def _mixed_inputs(seed: int, device: str) -> dict:
    """Half of the threads pass an index with out-of-range values."""
    x = _scatter_inputs(seed, device)
    x["bad"] = seed % 2 == 1
    if x["bad"]:
        few = x["few"].clone()
        few[::97] = N_FEW + 5
        few[13::101] = -3
        x["few"] = few
    return x


@pytest.mark.parametrize("row", scatter_rows_param())
def test_scatter_errors_from_threads(row: OpRow, device: str, assert_same_result) -> None:
    """Calls that fail (CPU: IndexError for an out-of-range index) interleaved
    with calls that succeed: the failing ones raise every time and leave out=
    untouched, the others are unaffected. On CUDA the bad values are skipped,
    the same way in every thread (or, in checked mode, raise as on the CPU)."""
    raises = torchplug.validates_indices(device)
    fn = row.fn()

    def work(x: dict):
        out = x["out"].clone()
        if x["bad"] and raises:
            with pytest.raises(IndexError, match=rf"torchplug::{row.name}.*'index'"):
                fn(x["src"], x["few"], 0, dim_size=N_FEW)
            with pytest.raises(IndexError, match=rf"torchplug::{row.name}.*'index'"):
                fn(x["src"], x["few"], 0, out=out)
            return (out,)  # untouched
        return (*_tuple(fn(x["src"], x["few"], 0, dim_size=N_FEW)),
                *_tuple(fn(x["src"], x["few"], 0, out=out)))

    inputs = [_mixed_inputs(3000 + t, device) for t in range(THREADS)]
    run_concurrently(device, inputs, work, _check_all(assert_same_result))
    if raises:
        bad = next(x for x in inputs if x["bad"])
        torch.testing.assert_close(work(bad)[0], bad["out"], rtol=0, atol=0)


def _tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


# --------------------------------------------------------------------------- autograd


def _grad_inputs(seed: int, device: str) -> dict:
    g = _generator(seed)
    return dict(
        x=_randn((E, F), torch.float64, g, device),
        bias=_randn((F,), torch.float64, g, device),
        base=_randn((N_FEW, F), torch.float64, g, device),
        weight=_randn((N_FEW, F), torch.float64, g, device),
        weight2=_randn((N_MANY, F), torch.float64, g, device),
        few=_randint(0, N_FEW, (E,), g, device),
        many=_randint(0, N_MANY, (E,), g, device),
        full=_randint(0, N_FEW, (E, F), g, device),
        x32=_randn((E, F), torch.float32, g, device),
    )


def _grad_work(inp: dict) -> tuple:
    """Forward and backward through add, scatter_sum (1-D and full index) and
    scatter_sum(out=) on a non-leaf, all inside the calling thread."""
    x = inp["x"].clone().requires_grad_()
    bias = inp["bias"].clone().requires_grad_()
    base = inp["base"].clone().requires_grad_()
    x32 = inp["x32"].clone().requires_grad_()
    h = torchplug.add(x, bias)
    agg = torchplug.scatter_sum(h, inp["few"], 0, dim_size=N_FEW)
    agg_full = torchplug.scatter_sum(h, inp["full"], 0, dim_size=N_FEW)
    acc = base * 2  # non-leaf: out= may write into it
    acc = torchplug.scatter_sum(h, inp["few"], 0, out=acc)
    wide = torchplug.scatter_sum(x32, inp["many"], 0, dim_size=N_MANY)
    loss = ((agg * inp["weight"]).sum() + (agg_full * agg_full).sum() + (acc * inp["weight"]).sum()
            + (wide.double() * inp["weight2"]).sum())
    grads = torch.autograd.grad(loss, (x, bias, base, x32))
    return (loss.detach(),) + grads


def test_autograd_from_threads(device: str, assert_same_result) -> None:
    inputs = [_grad_inputs(4000 + t, device) for t in range(THREADS)]
    run_concurrently(device, inputs, _grad_work, _check_all(assert_same_result))
    # The gradients are right, not only repeatable: against plain PyTorch.
    inp = inputs[0]
    got = _grad_work(inp)
    x = inp["x"].clone().requires_grad_()
    bias = inp["bias"].clone().requires_grad_()
    base = inp["base"].clone().requires_grad_()
    x32 = inp["x32"].clone().requires_grad_()
    h = x + bias
    zeros = torch.zeros(N_FEW, F, dtype=torch.float64, device=device)
    agg = zeros.index_add(0, inp["few"], h)
    agg_full = zeros.scatter_add(0, inp["full"], h)
    acc = (base * 2).index_add(0, inp["few"], h)
    wide = torch.zeros(N_MANY, F, device=device).index_add(0, inp["many"], x32)
    loss = ((agg * inp["weight"]).sum() + (agg_full * agg_full).sum() + (acc * inp["weight"]).sum()
            + (wide.double() * inp["weight2"]).sum())
    want = torch.autograd.grad(loss, (x, bias, base, x32))
    for g, w in zip(got[1:], want):
        torch.testing.assert_close(g, w)


def test_shared_graph_backward_from_threads(device: str, assert_same_result) -> None:
    """One forward graph built in the main thread; 8 threads run backward through
    it at once (retain_graph), each with its own grad_output."""
    g = _generator(5000)
    x = _randn((E, F), torch.float64, g, device).requires_grad_()
    bias = _randn((F,), torch.float64, g, device).requires_grad_()
    few = _randint(0, N_FEW, (E,), g, device)
    full = _randint(0, N_FEW, (E, F), g, device)
    base = _randn((N_FEW, F), torch.float64, g, device).requires_grad_()
    h = torchplug.add(x, bias)
    out = torchplug.scatter_sum(h, few, 0, dim_size=N_FEW) + torchplug.scatter_sum(h, full, 0, dim_size=N_FEW)
    acc = torchplug.scatter_sum(h, few, 0, out=base * 1)
    grad_outputs = [(_randn((N_FEW, F), torch.float64, g, device), _randn((N_FEW, F), torch.float64, g, device))
                    for _ in range(THREADS)]

    def work(go: tuple) -> tuple:
        return torch.autograd.grad((out, acc), (x, bias, base), go, retain_graph=True)

    run_concurrently(device, grad_outputs, work, _check_all(assert_same_result))
    # Against the closed form: d/dx = go0[few] + go0.gather(full) + go1[few].
    go0, go1 = grad_outputs[0]
    gx, gb, gbase = work(grad_outputs[0])
    want_x = go0[few] + go0.gather(0, full) + go1[few]
    torch.testing.assert_close(gx, want_x)
    torch.testing.assert_close(gb, want_x.sum(0))
    torch.testing.assert_close(gbase, go1, rtol=0, atol=0)


def _backward_inputs(row: OpRow, seed: int, device: str) -> dict:
    g = _generator(seed)
    sample = row.backward_sample(g, seed, device, E, F, N_FEW)
    shape = row.call(sample)[0].shape
    return dict(sample=sample, grad=_randn(shape, torch.float64, g, device))


def _backward_work(row: OpRow):
    def work(x: dict) -> tuple:
        sample = x["sample"]
        leaves = [t.detach().clone().requires_grad_() for t in sample.inputs[:row.leaf_count]]
        result = row.call_with(leaves, sample)
        return tuple(torch.autograd.grad(result[0], leaves, x["grad"]))
    return work


@pytest.mark.parametrize("row", rows_param())
def test_op_backward_from_threads(row: OpRow, device: str, assert_same_result) -> None:
    """Each op's backward from 8 threads at once agrees with one-by-one calls,
    which agree with the closed-form gradient."""
    if not row.differentiable:
        pytest.skip(f"{row.name} has no gradients")
    inputs = [_backward_inputs(row, 8000 + t, device) for t in range(THREADS)]
    work = _backward_work(row)
    run_concurrently(device, inputs, work, _check_all(assert_same_result))
    x = inputs[0]
    for got, want in zip(work(x), row.grad_reference(x["sample"], x["grad"])):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
