"""The scatter family on the GPU against the native calls, side by side in one
process (issue 19's workloads): median milliseconds of CUDA-event timings.

    python3 scripts/reduce_bench.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json

import torch

import torchplug

NATIVE = {"sum": "sum", "mean": "mean", "mul": "prod", "min": "amin", "max": "amax"}


def median_ms(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def copy_bandwidth() -> float:
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() / median_ms(lambda: y.copy_(x)) / 1e6  # GB/s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.manual_seed(0)
    bandwidth = copy_bandwidth()
    rows = []
    E, N = 10_000_000, 1_000_000
    for F, order in [(64, "random"), (64, "sorted"), (1, "random"), (16, "sorted"), (256, "sorted")]:
        e = E if F <= 64 else E // 4
        src = torch.randn(e, F, device="cuda")
        index = torch.randint(0, N, (e,), device="cuda")
        if order == "sorted":
            index = index.sort().values
        full = index.view(-1, 1).expand(e, F)
        min_bytes = 4 * e * F + 8 * e + 4 * N * F
        for reduce in ["sum", "mean", "mul", "min", "max"]:
            fn = getattr(torchplug, "scatter_" + reduce)
            ours = median_ms(lambda: fn(src, index, 0, dim_size=N))
            base = torch.zeros(N, F, device="cuda")
            native = median_ms(lambda: base.scatter_reduce(0, full, src, NATIVE[reduce], include_self=False))
            torch.use_deterministic_algorithms(True, warn_only=True)
            try:
                det = median_ms(lambda: fn(src, index, 0, dim_size=N), repeats=5)
            finally:
                torch.use_deterministic_algorithms(False)
            row = dict(F=F, order=order, E=e, N=N, reduce=reduce, torchplug_ms=ours, native_ms=native,
                       speedup=native / ours, deterministic_ms=det, det_cost=det / ours,
                       bandwidth_fraction=min_bytes / ours / 1e6 / bandwidth)
            rows.append(row)
            print(f"F={F:4d} {order:7s} {reduce:5s} torchplug {ours:7.3f} ms  scatter_reduce {native:7.3f} ms "
                  f"({native / ours:5.2f}x)  deterministic {det:7.3f} ms ({det / ours:4.2f}x)  "
                  f"{100 * row['bandwidth_fraction']:5.1f}% of copy", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy_GBps=bandwidth, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
