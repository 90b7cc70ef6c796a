"""What each workload runs: torchplug and what a user would call instead.

Every candidate is a call that allocates its output the way a user would
(``torch.zeros(N, F).index_add_(...)``) and returns it. Inputs a user would
keep between calls (the expanded index, segment lengths) are built here,
outside the timed call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

import torchplug

from .workloads import AddWorkload, ScatterWorkload, Workload

try:
    import torch_scatter
except ImportError:
    torch_scatter = None

#: The candidate the ratios are taken against.
TORCHPLUG = "torchplug"

#: torchplug with checked mode on: its ratio is what the checks cost.
CHECKED = "torchplug checked"

_EXPANDED = "expanded index prebuilt (stride-0 view)"
_LENGTHS = "given segment lengths (prebuilt)"


@dataclass(frozen=True)
class Candidate:
    """One implementation of a workload."""

    name: str
    fn: Callable[[], Tensor]  #: allocates, computes and returns the output
    note: str = ""


@dataclass(frozen=True)
class Lineup:
    """torchplug first (then, on CUDA, torchplug in checked mode), then the baselines.

    ``reference`` names the baseline whose output every candidate must match.
    """

    candidates: tuple[Candidate, ...]
    reference: str


def _checked(call: Callable[[], Tensor]) -> Callable[[], Tensor]:
    """``call`` with checked mode on, restored afterwards."""

    def run() -> Tensor:
        with torchplug.checked():
            return call()

    return run


def _scatter_lineup(workload: ScatterWorkload, device: torch.device) -> Lineup:
    """torchplug.scatter_sum against index_add_, scatter_add_, scatter_reduce_,
    segment_reduce (sorted index only) and torch_scatter (when installed)."""
    x = workload.make_inputs(device)
    src, index, n = x.src, x.index, workload.n

    def zeros() -> Tensor:
        return src.new_zeros(n, src.size(1))

    expanded = index.view(-1, 1).expand_as(src)
    candidates = [
        Candidate(TORCHPLUG, lambda: torchplug.scatter_sum(src, index, dim=0, dim_size=n)),
    ]
    if device.type == "cuda":  # CPU kernels always validate the index
        candidates.append(
            Candidate(
                CHECKED,
                _checked(lambda: torchplug.scatter_sum(src, index, dim=0, dim_size=n)),
                "checked mode: index validated first (torchplug.set_checks)",
            )
        )
    candidates += [
        Candidate("index_add_", lambda: zeros().index_add_(0, index, src)),
        Candidate("scatter_add_", lambda: zeros().scatter_add_(0, expanded, src), _EXPANDED),
        Candidate(
            "scatter_reduce_",
            lambda: zeros().scatter_reduce_(0, expanded, src, "sum", include_self=True),
            _EXPANDED,
        ),
    ]
    if workload.sorted_index:
        lengths = torch.bincount(index, minlength=n)
        candidates.append(
            Candidate(
                "segment_reduce",
                lambda: torch.segment_reduce(src, "sum", lengths=lengths, axis=0),
                _LENGTHS,
            )
        )
    if torch_scatter is not None:
        candidates.append(
            Candidate(
                "torch_scatter",
                lambda: torch_scatter.scatter(src, index, dim=0, dim_size=n, reduce="sum"),
            )
        )
    return Lineup(tuple(candidates), reference="index_add_")


def _add_lineup(workload: AddWorkload, device: torch.device) -> Lineup:
    """torchplug.add against torch.add."""
    x = workload.make_inputs(device)
    a, b = x.a, x.b
    candidates = (
        Candidate(TORCHPLUG, lambda: torchplug.add(a, b)),
        Candidate("torch.add", lambda: torch.add(a, b)),
    )
    return Lineup(candidates, reference="torch.add")


def lineup(workload: Workload, device: torch.device) -> Lineup:
    """Makes the workload's inputs on ``device`` (seeded, so the same every run)
    and the candidates over them."""
    torch.manual_seed(0)
    if isinstance(workload, ScatterWorkload):
        return _scatter_lineup(workload, device)
    return _add_lineup(workload, device)
