"""Timing a call (CUDA events on a GPU, wall clock on a CPU), its peak extra
memory, and the device's copy bandwidth."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


def time_call(
    fn: Callable[[], Tensor], device: torch.device, warmup: int, repeats: int
) -> list[float]:
    """Runs ``fn`` ``warmup`` times untimed, then ``repeats`` times timed.

    Returns:
        The time of each timed call in milliseconds.
    """
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        return _time_cuda(fn, device, repeats)
    return _time_cpu(fn, repeats)


def _time_cuda(fn: Callable[[], Tensor], device: torch.device, repeats: int) -> list[float]:
    """A pair of CUDA events around each call, on the current stream."""
    torch.cuda.synchronize(device)
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) for start, end in events]


def _time_cpu(fn: Callable[[], Tensor], repeats: int) -> list[float]:
    """Wall clock around each call; the output is freed after the clock stops."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1e3)
        del out
    return times


def call_with_peak_memory(
    fn: Callable[[], Tensor], device: torch.device
) -> tuple[Tensor, int | None]:
    """Calls ``fn`` once.

    Returns:
        Its output, and on CUDA the peak memory it allocated beyond what was
        allocated before the call and beyond the output itself, in bytes
        (``None`` on a CPU, where it is not measured).
    """
    if device.type != "cuda":
        return fn(), None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    return out, peak - before - out.untyped_storage().nbytes()


@dataclass(frozen=True)
class CopyBandwidth:
    """A device-to-device ``dst.copy_(src)`` of float32, bytes read + written."""

    bytes_moved: int
    times_ms: list[float]

    @property
    def bytes_per_s(self) -> float:
        """Bytes moved over the median time."""
        return self.bytes_moved / (statistics.median(self.times_ms) / 1e3)


def copy_bandwidth(device: torch.device, numel: int, warmup: int, repeats: int) -> CopyBandwidth:
    """Times a copy of ``numel`` float32 elements within ``device``'s memory."""
    src = torch.ones(numel, device=device)
    dst = torch.empty_like(src)
    times = time_call(lambda: dst.copy_(src), device, warmup, repeats)
    return CopyBandwidth(2 * src.nbytes, times)
