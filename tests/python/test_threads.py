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


def _randn(shape, dtype: torch.dtype, g: torch.Generator, device: str) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device)


def _randint(lo: int, hi: int, shape, g: torch.Generator, device: str, dtype=torch.int64) -> torch.Tensor:
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype).to(device)


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


# --------------------------------------------------------------------------- add


def _add_inputs(seed: int, device: str) -> dict:
    g = _generator(seed)
    return dict(
        a32=_randn((200, 300), torch.float32, g, device),
        b32=_randn((300,), torch.float32, g, device),
        a16=_randn((50, 1, 300), torch.float16, g, device),
        b16=_randn((40, 300), torch.bfloat16, g, device),  # promotes to float32
        ai=_randint(-(2**40), 2**40, (200, 300), g, device),
        bi=_randint(-100, 100, (200, 1), g, device, torch.int8),
        at=_randn((300, 200), torch.float64, g, device).t(),  # non-contiguous
        bt=_randn((200, 300), torch.float64, g, device),
    )


def _add_work(x: dict) -> tuple:
    return (
        torchplug.add(x["a32"], x["b32"]),
        torchplug.add(x["a16"], x["b16"]),
        torchplug.add(x["ai"], x["bi"]),
        torchplug.add(x["at"], x["bt"]),
    )


def test_add_from_threads(device: str, assert_same_result) -> None:
    inputs = [_add_inputs(1000 + t, device) for t in range(THREADS)]
    run_concurrently(device, inputs, _add_work, _check_all(assert_same_result))
    # The serial results are themselves right (threads agreeing on a wrong answer
    # would not do).
    x = inputs[0]
    got = _add_work(x)
    torch.testing.assert_close(got[0], x["a32"] + x["b32"], rtol=0, atol=0)
    torch.testing.assert_close(got[2], x["ai"] + x["bi"], rtol=0, atol=0)


# --------------------------------------------------------------------------- scatter_sum


def _scatter_inputs(seed: int, device: str) -> dict:
    g = _generator(seed)
    return dict(
        src=_randn((E, F), torch.float32, g, device),
        src16=_randn((E, F), torch.float16, g, device),
        srci=_randint(-1000, 1000, (E, F), g, device),
        few=_randint(0, N_FEW, (E,), g, device),
        many=_randint(0, N_MANY, (E,), g, device),
        full=_randint(0, N_FEW, (E, F), g, device),
        flat=_randn((4 * E,), torch.float64, g, device),
        flat_index=_randint(0, 777, (4 * E,), g, device),
        out=_randn((N_FEW, F), torch.float32, g, device),
        out_t=_randn((F, N_MANY), torch.float64, g, device),  # out= through .t()
        src64=_randn((E, F), torch.float64, g, device),
    )


def _scatter_work(x: dict) -> tuple:
    out = x["out"].clone()
    torchplug.scatter_sum(x["src"], x["few"], 0, out=out)
    out_t = x["out_t"].clone()
    torchplug.scatter_sum(x["src64"], x["many"], 0, out=out_t.t())
    return (
        torchplug.scatter_sum(x["src"], x["few"], 0, dim_size=N_FEW),  # private outputs
        torchplug.scatter_sum(x["src"], x["many"], 0, dim_size=N_MANY),  # row ownership
        torchplug.scatter_sum(x["src"], x["full"], 0, dim_size=N_FEW),  # full index: columns
        torchplug.scatter_sum(x["src16"], x["few"], 0),  # float16, default dim_size
        torchplug.scatter_sum(x["srci"], x["many"], -2, dim_size=N_MANY),  # int64, dim < 0
        torchplug.scatter_sum(x["src"].t(), x["few"], 1),  # non-contiguous src, dim 1
        torchplug.scatter_sum(x["flat"], x["flat_index"]),  # 1-D src, inner == 1
        out,
        out_t,
    )


def test_scatter_sum_from_threads(device: str, assert_same_result) -> None:
    inputs = [_scatter_inputs(2000 + t, device) for t in range(THREADS)]
    run_concurrently(device, inputs, _scatter_work, _check_all(assert_same_result))
    # Spot-check the serial results against plain PyTorch (integers: exact).
    x = inputs[0]
    got = _scatter_work(x)
    want = torch.zeros(N_MANY, F, dtype=torch.int64, device=device).index_add_(0, x["many"], x["srci"])
    torch.testing.assert_close(got[4], want, rtol=0, atol=0)
    want = torch.zeros(N_FEW, F, dtype=torch.float64, device=device).index_add_(0, x["few"], x["src"].double())
    torch.testing.assert_close(got[0].double(), want, rtol=1e-5, atol=1e-5)


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


def test_scatter_sum_errors_from_threads(device: str, assert_same_result) -> None:
    """Calls that fail (CPU: IndexError for an out-of-range index) interleaved
    with calls that succeed: the failing ones raise every time and leave out=
    untouched, the others are unaffected. On CUDA the bad values are skipped,
    the same way in every thread (or, in checked mode, raise as on the CPU)."""
    raises = torchplug.validates_indices(device)

    def work(x: dict):
        out = x["out"].clone()
        if x["bad"] and raises:
            with pytest.raises(IndexError, match="torchplug::scatter_sum.*'index'"):
                torchplug.scatter_sum(x["src"], x["few"], 0, dim_size=N_FEW)
            with pytest.raises(IndexError, match="torchplug::scatter_sum.*'index'"):
                torchplug.scatter_sum(x["src"], x["few"], 0, out=out)
            return (out,)  # untouched
        return (torchplug.scatter_sum(x["src"], x["few"], 0, dim_size=N_FEW),
                torchplug.scatter_sum(x["src"], x["few"], 0, out=out))

    inputs = [_mixed_inputs(3000 + t, device) for t in range(THREADS)]
    run_concurrently(device, inputs, work, _check_all(assert_same_result))
    if raises:
        bad = next(x for x in inputs if x["bad"])
        torch.testing.assert_close(work(bad)[0], bad["out"], rtol=0, atol=0)


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
