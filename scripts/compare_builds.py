"""Joins benchmark runs of two builds into one before/after table.

    python scripts/compare_builds.py --before old-*.json --after new-*.json

Each file is a ``python -m torchplug.bench --json`` run; runs of a build are
pooled per workload (the median of their torchplug medians). Prints a
markdown table: workload, before ms, after ms, after / before (above 1: the
after build is slower).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def torchplug_medians(paths: list[Path]) -> dict[str, list[float]]:
    """Workload (op: name) -> the torchplug candidate's median of each run."""
    medians: dict[str, list[float]] = {}
    for path in paths:
        for workload in json.loads(path.read_text())["workloads"]:
            for candidate in workload["candidates"]:
                if candidate["name"] == "torchplug" and candidate["median_ms"] is not None:
                    key = f"{workload['op']}: {workload['name']}"
                    medians.setdefault(key, []).append(candidate["median_ms"])
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    before, after = torchplug_medians(args.before), torchplug_medians(args.after)
    print("| workload | before ms | after ms | after / before |")
    print("| --- | --- | --- | --- |")
    for key in before:
        if key not in after:
            continue
        old, new = statistics.median(before[key]), statistics.median(after[key])
        print(f"| {key} | {old:.4f} | {new:.4f} | {new / old:.3f} |")
    missing = sorted(set(before) ^ set(after))
    if missing:
        print(f"\nin one build only: {', '.join(missing)}")


if __name__ == "__main__":
    main()
