"""Side by side timing for any op, a plugin's included::

    from torchplug.bench import compare

    compare({"edge_dot": lambda: torch.ops.example.edge_dot(x, y, src, dst),
             "plain": lambda: (x[src] * y[dst]).sum(-1)}, reference="plain")

Every candidate's output is checked against the reference's first; the table
gives each one's median and its speed relative to the reference.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from .measure import matches
from .timing import time_call


@dataclass(frozen=True)
class Comparison:
    """One candidate's figures."""

    name: str
    median_ms: float
    speedup: float  #: the reference's median over this one's (> 1: faster)
    matches: bool  #: its output agrees with the reference's (measure.TOLERANCES)


def compare(
    candidates: Mapping[str, Callable[[], Tensor]],
    *,
    reference: str | None = None,
    device: torch.device | str | None = None,
    warmup: int = 5,
    repeats: int = 20,
    terms_per_output: float = 1.0,
    show: bool = True,
) -> list[Comparison]:
    """Times each candidate (CUDA events on a GPU, wall clock on the CPU).

    Args:
        candidates: name -> a call that allocates, computes and returns its output.
        reference: the candidate the others are checked and compared against
            (default: the last one).
        device: where the calls run (default: the reference output's device).
        terms_per_output: how many terms are summed into one output, which
            widens the tolerance (summation order differs between candidates).
        show: print the table.
    """
    reference = reference if reference is not None else list(candidates)[-1]
    expected = candidates[reference]()
    device = torch.device(device) if device is not None else expected.device
    results = []
    for name, fn in candidates.items():
        agrees = matches(fn(), expected, terms_per_output)
        results.append((name, statistics.median(time_call(fn, device, warmup, repeats)), agrees))
    base = next(median for name, median, _ in results if name == reference)
    table = [Comparison(name, median, base / median, agrees) for name, median, agrees in results]
    if show:
        width = max(len(name) for name in candidates)
        print(f"{'candidate':<{width}}  {'median ms':>10}  {'vs ' + reference:>12}  output")
        for row in table:
            verdict = "ok" if row.matches else "WRONG"
            print(f"{row.name:<{width}}  {row.median_ms:>10.4f}  {row.speedup:>11.2f}x  {verdict}")
    return table
