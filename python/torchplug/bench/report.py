"""The results of a run: a table for stdout, a JSON record, and a PNG bar chart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .measure import OK, CandidateResult, WorkloadResult
from .timing import CopyBandwidth


@dataclass(frozen=True)
class Run:
    """One invocation of the benchmark and everything it measured."""

    device: str  #: "cpu" or "cuda"
    device_name: str
    torch_version: str
    torchplug_version: str
    date: str  #: ISO 8601, local time with offset
    command: str
    profile: str
    warmup: int
    repeats: int
    rounds: int  #: times every candidate was timed, in turn
    threads: int
    copy: CopyBandwidth
    results: list[WorkloadResult]


_HEADER = ("workload", "candidate", "median ms", "ratio", "% copy BW", "extra MB", "note")
_RANGE = "ratio range"  # a column after "ratio", for runs of several rounds


def _cells(
    result: WorkloadResult,
    candidate: CandidateResult,
    copy_bytes_per_s: float,
    first: bool,
    with_range: bool,
) -> tuple[str, ...]:
    """One table row; the workload's name only on its first row."""
    workload = result.workload.name if first else ""
    if candidate.status != OK:
        cells = (workload, candidate.name, candidate.status, "", "", "", candidate.note)
        return cells[:4] + ("",) + cells[4:] if with_range else cells
    ratio = result.ratio(candidate)
    fraction = result.copy_fraction(candidate, copy_bytes_per_s)
    extra = "n/a" if candidate.extra_bytes is None else f"{candidate.extra_bytes / 1e6:.1f}"
    cells = (
        workload,
        candidate.name,
        f"{candidate.median_ms:.3f}",
        "-" if ratio is None else f"{ratio:.2f}x",
    )
    if with_range:
        spread = result.ratio_range(candidate)
        cells += ("-" if spread is None else f"{spread[0]:.2f}-{spread[1]:.2f}x",)
    return (*cells, f"{100 * fraction:.1f}", extra, candidate.note)


def format_table(run: Run) -> str:
    """The results as a fixed-width text table with a legend."""
    with_range = run.rounds > 1
    header = _HEADER[:4] + (_RANGE,) + _HEADER[4:] if with_range else _HEADER
    rows = [header]
    for result in run.results:
        rows += [
            _cells(result, candidate, run.copy.bytes_per_s, first=i == 0, with_range=with_range)
            for i, candidate in enumerate(result.candidates)
        ]
    widths = [max(len(row[col]) for row in rows) for col in range(len(header))]
    right = set(range(2, len(header) - 1))  # numeric columns

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(w) if col in right else cell.ljust(w)
            for col, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    rule = "-" * len(line(rows[0]))
    body = [line(rows[0]), rule]
    for row in rows[1:]:
        if row[0] and len(body) > 2:
            body.append("")
        body.append(line(row))
    return "\n".join(
        [
            f"torchplug {run.torchplug_version} bench on {run.device_name} ({run.device}), "
            f"torch {run.torch_version}, profile '{run.profile}', {run.threads} threads, "
            f"{run.warmup} warm-up + {run.repeats} timed calls"
            + (f", {run.rounds} rounds" if with_range else ""),
            f"copy bandwidth: {run.copy.bytes_per_s / 1e9:.1f} GB/s (bytes read + written)",
            "",
            *body,
            "",
            "ratio: baseline median / torchplug median (>1: torchplug is faster);",
            "  on the 'torchplug checked' row, what checked mode costs",
            *(
                [
                    "  with rounds, the median is that of the rounds' medians, and the ratio",
                    "  range the lowest and highest ratio of one round's medians",
                ]
                if with_range
                else []
            ),
            "% copy BW: minimum bytes / median time, as a share of the copy bandwidth",
            "extra MB: peak memory allocated beyond inputs and output (10^6 bytes; CUDA only)",
            "WRONG: output differs from the reference (index_add_ / torch.add); FAILED: raised",
            "prebuilt: built once outside the timed call, as a user would keep it",
        ]
    )


def to_json(run: Run) -> dict[str, object]:
    """The run as a JSON-ready dict: metadata, copy bandwidth, every median and raw time."""
    return {
        "device": run.device,
        "device_name": run.device_name,
        "torch_version": run.torch_version,
        "torchplug_version": run.torchplug_version,
        "date": run.date,
        "command": run.command,
        "profile": run.profile,
        "warmup": run.warmup,
        "repeats": run.repeats,
        "rounds": run.rounds,
        "threads": run.threads,
        "copy_bandwidth": {
            "bytes_per_s": run.copy.bytes_per_s,
            "bytes_moved": run.copy.bytes_moved,
            "times_ms": run.copy.times_ms,
        },
        "workloads": [
            {
                "name": result.workload.name,
                "op": result.workload.op,
                "params": result.workload.params(),
                "min_bytes": result.workload.min_bytes(),
                "candidates": [
                    {
                        "name": c.name,
                        "status": c.status,
                        "median_ms": c.median_ms,
                        "times_ms": c.times_ms,
                        "round_medians_ms": c.round_medians_ms,
                        "ratio": result.ratio(c),
                        "ratio_range": result.ratio_range(c),
                        "copy_bandwidth_fraction": result.copy_fraction(c, run.copy.bytes_per_s),
                        "extra_bytes": c.extra_bytes,
                        "note": c.note,
                        "error": c.error,
                    }
                    for c in result.candidates
                ],
            }
            for result in run.results
        ],
    }


def write_json(run: Run, path: Path) -> None:
    """Writes :func:`to_json` to ``path``, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(run), indent=2) + "\n")


def write_plot(run: Run, path: Path) -> None:
    """A grouped bar chart of % copy bandwidth: one group per workload, one
    bar per candidate that was timed. Imports matplotlib only here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(c.name for r in run.results for c in r.candidates))
    colors = {name: f"C{k}" for k, name in enumerate(names)}
    width = 0.8 / max(len(r.candidates) for r in run.results)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(run.results)), 5.0))
    labelled: set[str] = set()
    for i, result in enumerate(run.results):
        fractions = [
            (c.name, result.copy_fraction(c, run.copy.bytes_per_s)) for c in result.candidates
        ]
        timed = [(name, fraction) for name, fraction in fractions if fraction is not None]
        for j, (name, fraction) in enumerate(timed):
            ax.bar(
                i + (j - (len(timed) - 1) / 2) * width,
                100 * fraction,
                width,
                color=colors[name],
                label=None if name in labelled else name,
            )
            labelled.add(name)
    ax.set_xticks(range(len(run.results)))
    ax.set_xticklabels([r.workload.name for r in run.results], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% of copy bandwidth (higher is faster)")
    ax.set_title(
        f"torchplug bench, {run.device_name}: copy bandwidth {run.copy.bytes_per_s / 1e9:.0f} GB/s"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
