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


@dataclass
class CandidateResult:
    """What one candidate did on one workload."""

    name: str
    note: str
    status: str = OK  #: OK, WRONG or FAILED
    times_ms: list[float] = field(default_factory=list)
    extra_bytes: int | None = None  #: peak memory beyond inputs and output (CUDA only)
    error: str = ""  #: the exception's message when FAILED

    @property
    def median_ms(self) -> float | None:
        """Median of the timed repeats; ``None`` when not timed."""
        return statistics.median(self.times_ms) if self.times_ms else None


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

    def copy_fraction(self, candidate: CandidateResult, copy_bytes_per_s: float) -> float | None:
        """Minimum bytes over the median time, as a fraction of the copy bandwidth."""
        if candidate.median_ms is None:
            return None
        return self.workload.min_bytes() / (candidate.median_ms / 1e3) / copy_bytes_per_s


def run_workload(
    workload: Workload, device: torch.device, warmup: int, repeats: int
) -> WorkloadResult:
    """Checks each candidate once (measuring its peak extra memory), then times
    those whose output matched the reference."""
    plan = lineup(workload, device)
    reference_fn = next(c.fn for c in plan.candidates if c.name == plan.reference)
    reference, reference_extra = call_with_peak_memory(reference_fn, device)
    results = []
    for candidate in plan.candidates:
        result = CandidateResult(candidate.name, candidate.note)
        try:
            if candidate.name == plan.reference:
                out, result.extra_bytes = reference, reference_extra
            else:
                out, result.extra_bytes = call_with_peak_memory(candidate.fn, device)
        except RuntimeError as error:
            result.status, result.error = FAILED, str(error)
        else:
            if not matches(out, reference, workload.terms_per_output):
                result.status = WRONG
            del out
        results.append(result)
    del reference
    for candidate, result in zip(plan.candidates, results, strict=True):
        if result.status != OK:
            continue
        try:
            result.times_ms = time_call(candidate.fn, device, warmup, repeats)
        except RuntimeError as error:
            result.status, result.error = FAILED, str(error)
    return WorkloadResult(workload, results)
