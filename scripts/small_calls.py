"""What one small torchplug.scatter_sum call costs, host work included.

    PYTHONPATH=build/install python3 scripts/small_calls.py [--device cuda] [--rounds 5]
    TORCHPLUG_SCATTER_ATOMIC_LIMIT=0 PYTHONPATH=build/install python3 scripts/small_calls.py

GNN mini-batches make many calls of tens of thousands of rows, where launches
and allocations, not bytes, set the time. Each workload runs back to back
(2000 calls, or as many as make 40M source elements, at least 20; fewer,
down to 3, for a candidate whose round would take more than 0.2 s) in rounds
that alternate torchplug with index_add_ and scatter_add_ (each from a fresh
zero output, as the benchmark times them); the table gives microseconds per
call, the median over rounds. The second command takes the CSR for every
size on CUDA, the path these calls took before the atomic rows
(docs/benchmarks.md); rows of at most 64 bytes with an unsorted index still
end in the atomic rows there, after the CSR's counting pass. A development tool: the benchmark gives the figures
for the large workloads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

import torchplug

# At most this long per candidate and round, but at least 3 calls.
ROUND_BUDGET_US = 200_000

# (E, F, N, index): "one" sends every entry to row 0.
WORKLOADS = [
    (10_000, 64, 1_000, "random"),
    (10_000, 64, 1_000, "sorted"),
    (10_000, 64, 1_000, "one"),
    (100_000, 16, 10_000, "random"),
    (100_000, 16, 10_000, "one"),
    (32_768, 64, 3_000, "random"),
    (32_768, 64, 3_000, "one"),
    (131_072, 16, 100_000, "random"),
    (131_072, 16, 100_000, "one"),
    (1_000_000, 16, 100_000, "random"),
]


def make_index(kind: str, E: int, N: int, device: str) -> torch.Tensor:
    if kind == "one":
        return torch.zeros(E, dtype=torch.long, device=device)
    index = torch.randint(0, N, (E,), device=device)
    return index.sort().values if kind == "sorted" else index


def check_sums(out: torch.Tensor, src: torch.Tensor, index: torch.Tensor, N: int) -> None:
    """out is the scatter-sum within float32 accumulation error (1e-5 of the
    magnitude summed into each slot), plus one rounding for bfloat16."""
    wide = src.double()
    exact = wide.new_zeros(N, src.size(1)).index_add_(0, index, wide)
    magnitude = wide.new_zeros(N, src.size(1)).index_add_(0, index, wide.abs())
    rounding = 2**-7 * exact.abs() if src.dtype == torch.bfloat16 else 0
    error = (out.double() - exact).abs()
    assert bool((error <= 1e-5 * magnitude + 1e-5 + rounding).all()), "torchplug.scatter_sum is off"


def per_call_us(fn: Callable[[], torch.Tensor], calls: int, device: str) -> float:
    """Microseconds per call over `calls` calls back to back, synchronised once."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    limit = os.environ.get("TORCHPLUG_SCATTER_ATOMIC_LIMIT", "default")
    print(f"{args.device}, {args.dtype}, atomic limit {limit}: microseconds per call")
    print(f"{'E':>9} {'F':>3} {'N':>7} {'index':<7} {'torchplug':>10} {'index_add_':>11} {'scatter_add_':>13}")
    for E, F, N, kind in WORKLOADS:
        index = make_index(kind, E, N, args.device)
        src = torch.randn(E, F, device=args.device).to(dtype)
        expanded = index.view(-1, 1).expand(E, F)
        candidates = {
            "torchplug": lambda: torchplug.scatter_sum(src, index, 0, dim_size=N),
            "index_add_": lambda: src.new_zeros(N, F).index_add_(0, index, src),
            "scatter_add_": lambda: src.new_zeros(N, F).scatter_add_(0, expanded, src),
        }
        check_sums(candidates["torchplug"](), src, index, N)
        calls = max(20, min(2000, 40_000_000 // (E * F)))
        # A candidate that serialises (scatter_add_ of bfloat16 onto one row
        # takes about half a second per call on the H200) gets fewer calls.
        counts = {}
        for name, fn in candidates.items():
            warm = per_call_us(fn, max(2, calls // 10), args.device)
            counts[name] = max(3, min(calls, int(ROUND_BUDGET_US / warm)))
        times: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(args.rounds):
            for name, fn in candidates.items():
                times[name].append(per_call_us(fn, counts[name], args.device))
        medians = [statistics.median(times[name]) for name in candidates]
        print(f"{E:>9} {F:>3} {N:>7} {kind:<7} {medians[0]:>10.1f} {medians[1]:>11.1f} {medians[2]:>13.1f}")


if __name__ == "__main__":
    main()
