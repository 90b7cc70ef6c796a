"""Where a torchplug.scatter_sum call spends its GPU time, kernel by kernel.

    PYTHONPATH=build/install python3 scripts/kernel_breakdown.py [--only-misses]

Profiles each GPU benchmark workload (python -m torchplug.bench's sizes) with
torch.profiler and prints, per workload, each kernel's device time per call
and the call's wall time (host gaps and synchronisations included), next to
scatter_add_'s total. A development tool: the benchmark gives the figures.
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import torchplug
from torchplug.bench.workloads import ScatterWorkload, select_profile

CALLS = 10
_OURS = "void torchplug::scatter_detail::(anonymous namespace)::"


def wall_ms(fn: Callable[[], torch.Tensor]) -> float:
    """Median wall time of one call, synchronised."""
    times = []
    for _ in range(CALLS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def kernel_ms(fn: Callable[[], torch.Tensor]) -> dict[str, float]:
    """Device time per call of each kernel ``fn`` launches."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = collections.defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name.removeprefix(_OURS)] += event.device_time / 1e3 / CALLS
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only-misses", action="store_true", help="F=1, F=64 random, F=16 sorted")
    args = parser.parse_args()
    device = torch.device("cuda")
    for w in select_profile(device, quick=False, tiny=False).workloads:
        if not isinstance(w, ScatterWorkload) or w.reduce != "sum" or w.last_dim:
            continue  # the sum along dim 0 (scatter_add_ is the comparison)
        if args.only_misses and (w.f, w.sorted_index) not in {(1, False), (64, False), (16, True)}:
            continue
        torch.manual_seed(0)
        x = w.make_inputs(device)
        expanded = x.index.view(-1, 1).expand_as(x.src)

        def ours() -> torch.Tensor:
            return torchplug.scatter_sum(x.src, x.index, 0, dim_size=w.n)

        def theirs() -> torch.Tensor:
            return x.src.new_zeros(w.n, w.f).scatter_add_(0, expanded, x.src)

        kernels = kernel_ms(ours)
        print(
            f"{w.name}: wall {wall_ms(ours):.3f} ms, kernels {sum(kernels.values()):.3f} ms, "
            f"scatter_add_ wall {wall_ms(theirs):.3f} ms"
        )
        for name, ms in sorted(kernels.items(), key=lambda kv: -kv[1]):
            print(f"    {ms:8.3f} ms  {name[:100]}")
        del x, expanded
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
