"""``python -m torchplug.bench``: runs the workloads, prints the table, writes the JSON."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
from pathlib import Path

import torch

import torchplug

from .measure import run_workload
from .report import Run, format_table, write_json, write_plot
from .timing import copy_bandwidth
from .workloads import REAL, is_real, select_profile


def _positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; see docs/benchmarks.md."""
    parser = argparse.ArgumentParser(
        prog="python -m torchplug.bench",
        description="torchplug's ops side by side with what a user would call instead.",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where to run (default: cuda if available)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: under a minute on a 2-core CPU"
    )
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", metavar="OP",
                        help="run one op's workloads (scatter, segment, spmm, ...), or 'real': every power-law "
                             "and small-graph-batch workload")
    parser.add_argument(
        "--repeats",
        type=_positive,
        help="timed calls per candidate (default: the profile's, e.g. 20 on cuda)",
    )
    parser.add_argument(
        "--rounds",
        type=_positive,
        default=1,
        help="time every candidate this many times in turn and report the spread of the ratios",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="where to write the JSON (default: bench-results/bench-<device>.json)",
    )
    parser.add_argument("--plot", type=Path, help="also write a PNG bar chart here (matplotlib)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    return args


def _device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name from /proc/cpuinfo where there is one."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> None:
    """Runs the benchmark; progress goes to stderr, the table to stdout."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if args.device == "cuda"
        else torch.device("cpu")
    )
    torch.set_num_threads(os.cpu_count() or 1)
    profile = select_profile(device, args.quick, args.tiny)
    repeats = args.repeats or profile.repeats
    ops = sorted({w.op for w in profile.workloads}) + [REAL]
    if args.only is not None and args.only not in ops:
        sys.exit(f"python -m torchplug.bench: --only must be one of {', '.join(ops)}, got '{args.only}'")
    workloads = [w for w in profile.workloads if args.only in (None, w.op) or (args.only == REAL and is_real(w))]

    copy = copy_bandwidth(device, profile.copy_numel, profile.warmup, repeats)
    print(f"copy bandwidth: {copy.bytes_per_s / 1e9:.1f} GB/s", file=sys.stderr, flush=True)
    results = []
    for i, workload in enumerate(workloads, 1):
        print(f"[{i}/{len(workloads)}] {workload.name}", file=sys.stderr, flush=True)
        results.append(run_workload(workload, device, profile.warmup, repeats, args.rounds))
        if device.type == "cuda":
            torch.cuda.empty_cache()

    run = Run(
        device=device.type,
        device_name=_device_name(device),
        torch_version=torch.__version__,
        torchplug_version=torchplug.__version__,
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        command=shlex.join(["python", "-m", "torchplug.bench", *argv]),
        profile=profile.name,
        warmup=profile.warmup,
        repeats=repeats,
        rounds=args.rounds,
        threads=torch.get_num_threads(),
        copy=copy,
        results=results,
    )
    print(format_table(run))
    json_path = args.json or Path("bench-results") / f"bench-{device.type}.json"
    write_json(run, json_path)
    print(f"wrote {json_path}", file=sys.stderr)
    if args.plot:
        write_plot(run, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
