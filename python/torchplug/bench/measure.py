"""Runs one workload: checks every candidate's output against the reference,
then times the candidates that matched."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .candidates import TORCHPLUG, lineup
from .timing import call_with_peak_memory, time_call
from .workloads import Workload

OK = "ok"
WRONG = "WRONG"  #: the output differs from the reference's
FAILED = "FAILED"  #: the call raised (an unsupported case, out of memory, ...)

#: (rtol, atol per summed term) by dtype: atol grows with the number of terms
#: summed into one output, since summation order differs between candidates
#: (and CUDA's index_add_ accumulates half types in their own precision).
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-10),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 5e-3),
    torch.bfloat16: (5e-2, 2.5e-2),
}


def matches(out: Tensor, reference: Tensor, terms_per_output: float) -> bool:
    """Same shape and dtype as ``reference`` and allclose to it within ``TOLERANCES``."""
    if out.shape != reference.shape or out.dtype != reference.dtype:
        return False
    rtol, atol = TOLERANCES[reference.dtype]
    wide = torch.promote_types(reference.dtype, torch.float32)
    return torch.allclose(out.to(wide), reference.to(wide), rtol=rtol, atol=atol * terms_per_output)


def agrees(workload: Workload, out: Tensor, reference: Tensor) -> bool:
    """The workload's own ``agrees(out, reference)`` where it has one (random
    outputs: the samplers'), else :func:`matches`."""
    own = getattr(workload, "agrees", None)
    return own(out, reference) if own is not None else matches(out, reference, workload.terms_per_output)


@dataclass
class CandidateResult:
    """What one candidate did on one workload."""

    name: str
    note: str
    status: str = OK  #: OK, WRONG or FAILED
    rounds_ms: list[list[float]] = field(default_factory=list)  #: each round's timed calls
    extra_bytes: int | None = None  #: peak memory beyond inputs and output (CUDA only)
    error: str = ""  #: the exception's message when FAILED

    @property
    def times_ms(self) -> list[float]:
        """Every timed call, round after round."""
        return [t for times in self.rounds_ms for t in times]

    @property
    def round_medians_ms(self) -> list[float]:
        """The median of each round's timed calls."""
        return [statistics.median(times) for times in self.rounds_ms]

    @property
    def median_ms(self) -> float | None:
        """Median of the rounds' medians (of the timed calls, for one round);
        ``None`` when not timed."""
        return statistics.median(self.round_medians_ms) if self.rounds_ms else None


@dataclass
class WorkloadResult:
    """Every candidate's result on one workload."""

    workload: Workload
    candidates: list[CandidateResult]

    def ratio(self, candidate: CandidateResult) -> float | None:
        """``candidate``'s median over torchplug's: torchplug's speedup over it.

        ``None`` for torchplug itself and when either was not timed.
        """
        torchplug = next(c for c in self.candidates if c.name == TORCHPLUG)
        if candidate is torchplug or candidate.median_ms is None or torchplug.median_ms is None:
            return None
        return candidate.median_ms / torchplug.median_ms

    def ratio_range(self, candidate: CandidateResult) -> tuple[float, float] | None:
        """The lowest and highest of ``candidate``'s round medians over
        torchplug's in the same round; ``None`` where :meth:`ratio` is."""
        torchplug = next(c for c in self.candidates if c.name == TORCHPLUG)
        if self.ratio(candidate) is None:
            return None
        ratios = [
            theirs / ours
            for theirs, ours in zip(
                candidate.round_medians_ms, torchplug.round_medians_ms, strict=True
            )
        ]
        return min(ratios), max(ratios)

    def copy_fraction(self, candidate: CandidateResult, copy_bytes_per_s: float) -> float | None:
        """Minimum bytes over the median time, as a fraction of the copy bandwidth."""
        if candidate.median_ms is None:
            return None
        return self.workload.min_bytes() / (candidate.median_ms / 1e3) / copy_bytes_per_s


def run_workload(
    workload: Workload, device: torch.device, warmup: int, repeats: int, rounds: int = 1
) -> WorkloadResult:
    """Checks each candidate once (measuring its peak extra memory), then times
    those whose output matched the reference: ``rounds`` times over, each round
    timing every candidate in turn, so that a slow spell of the machine lands
    on all of them rather than on one."""
    plan = lineup(workload, device)
    reference_candidate = next(c for c in plan.candidates if c.name == plan.reference)
    with reference_candidate.context():
        reference, reference_extra = call_with_peak_memory(reference_candidate.fn, device)
    results = []
    for candidate in plan.candidates:
        result = CandidateResult(candidate.name, candidate.note)
        try:
            if candidate.name == plan.reference:
                out, result.extra_bytes = reference, reference_extra
            else:
                with candidate.context():
                    out, result.extra_bytes = call_with_peak_memory(candidate.fn, device)
        except RuntimeError as error:
            result.status, result.error = FAILED, str(error)
        else:
            if not agrees(workload, out, reference):
                result.status = WRONG
            del out
        results.append(result)
    del reference
    for _ in range(rounds):
        for candidate, result in zip(plan.candidates, results, strict=True):
            if result.status != OK:
                continue
            try:
                with candidate.context():
                    result.rounds_ms.append(time_call(candidate.fn, device, warmup, repeats))
            except RuntimeError as error:
                result.status, result.error, result.rounds_ms = FAILED, str(error), []
    return WorkloadResult(workload, results)
