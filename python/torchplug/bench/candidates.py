"""What a workload runs (its lineup): torchplug and what a user would call
instead, with the helpers the families' bench modules share.

Every candidate is a call that allocates its output the way a user would
(``torch.zeros(N, F).index_add_(...)``) and returns it. Inputs a user would
keep between calls (the expanded index, segment lengths) are built here,
outside the timed call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

import torchplug

from .workloads import Workload

try:
    import torch_scatter
except ImportError:
    torch_scatter = None

#: The candidate the ratios are taken against.
TORCHPLUG = "torchplug"

#: torchplug with checked mode on: its ratio is what the checks cost.
CHECKED = "torchplug checked"
#: torchplug under torch.use_deterministic_algorithms(True) (CUDA only).
DETERMINISTIC = "torchplug deterministic"

EXPANDED = "expanded index prebuilt (stride-0 view)"
LENGTHS = "given segment lengths (prebuilt)"


@dataclass(frozen=True)
class Candidate:
    """One implementation of a workload."""

    name: str
    fn: Callable[[], Tensor]  #: allocates, computes and returns the output
    note: str = ""
    #: the state ``fn`` runs in (the PyG backend on or off), entered around
    #: its check and around its timed calls, outside the clock
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


@dataclass(frozen=True)
class Lineup:
    """torchplug first (then, on CUDA, torchplug in checked mode), then the baselines.

    ``reference`` names the baseline whose output every candidate must match.
    """

    candidates: tuple[Candidate, ...]
    reference: str


def deterministic(call: Callable[[], Tensor]) -> Callable[[], Tensor]:
    """``call`` in deterministic mode, restored afterwards."""

    def run() -> Tensor:
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            return call()
        finally:
            torch.use_deterministic_algorithms(before)

    return run


def checked(call: Callable[[], Tensor]) -> Callable[[], Tensor]:
    """``call`` with checked mode on, restored afterwards."""

    def run() -> Tensor:
        with torchplug.checked():
            return call()

    return run


def lineup(workload: Workload, device: torch.device) -> Lineup:
    """Makes the workload's inputs on ``device`` (seeded, so the same every run)
    and the candidates over them."""
    torch.manual_seed(0)
    return workload.lineup(device)
