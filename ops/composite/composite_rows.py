"""The composites' op-table rows (tests/python/op_table.py): softmax and
log_softmax over an index's groups, softmax_csr, logsumexp and std, against
composite_reference.py's float64 forms within each dtype's tolerance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

import composite_reference
from index_reference import csr_rows
from op_table import (FLOATS, TOLERANCE, OpRow, Sample, ScatterCallRow, rand_indptr, scatter_grad_samples,
                      scatter_samples, values)


class CompositeRow(OpRow):
    """A composite: its float64 reference is differentiable, so autograd
    through it is the gradient reference."""

    def value(self, src: Tensor, positions: Tensor, sample: Sample) -> Tensor:
        """The float64 result from `src` (differentiable) and the sample's index or indptr."""
        raise NotImplementedError

    def reference(self, sample: Sample) -> Tensor:
        src, positions = sample.inputs
        return self.value(src, positions, sample)

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        context = f"{self.name} {sample!r} {context}"
        src = sample.inputs[0]
        got = outputs[0]
        ref = self.reference(sample)
        assert got.dtype == src.dtype and got.device == src.device and got.shape == ref.shape, context
        rtol, atol = TOLERANCE[src.dtype]
        torch.testing.assert_close(got.double().cpu(), ref.cpu(), rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{context}\n{m}")

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        src, positions = sample.inputs
        leaf = src.detach().double().requires_grad_()
        return torch.autograd.grad(self.value(leaf, positions, sample), leaf, grad.double())


class IndexCompositeRow(CompositeRow):
    """A composite over the groups an index names, sampled like scatter (out=
    only where the op has an in-place form)."""

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        return [s for s in scatter_samples(None, device, dtype, g) if s.out is None or self.inplace]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        return [s for s in scatter_grad_samples(None, device, g) if s.out is None]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        g = torch.Generator().manual_seed(seed)
        src = values((E, F), dtype, None, g).to(device)
        return Sample((src, torch.randint(0, N, (E,), generator=g).to(device)), 0, N)


@dataclass
class SoftmaxRow(IndexCompositeRow):
    """``scatter_(log_)softmax(src, index, dim, dim_size)``: a value per source."""

    log: bool = False

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(inputs[0], inputs[1], sample.dim, sample.dim_size)

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs + (sample.dim, sample.dim_size)

    def value(self, src: Tensor, positions: Tensor, sample: Sample) -> Tensor:
        return composite_reference.softmax(src, positions, sample.dim, sample.dim_size, log=self.log)


class GroupCompositeRow(ScatterCallRow, IndexCompositeRow):
    """``scatter_logsumexp/std(src, index, dim, out, dim_size)``: a value per group."""


class LogsumexpRow(GroupCompositeRow):
    def value(self, src: Tensor, positions: Tensor, sample: Sample) -> Tensor:
        return composite_reference.logsumexp(src, positions, sample.dim, sample.dim_size, sample.out)


class StdRow(GroupCompositeRow):
    def value(self, src: Tensor, positions: Tensor, sample: Sample) -> Tensor:
        return composite_reference.std(src, positions, sample.dim, sample.dim_size)


class SoftmaxCsrRow(CompositeRow):
    """``softmax_csr(src, indptr, dim)``: groups are the indptr's segments along dim."""

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(inputs[0], inputs[1], sample.dim)

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs + (sample.dim,)

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        """1-D indptr classes: dims 0, 1 and -1, non-contiguous src, a segment
        past CUDA's long-row limit, empty segments and sources."""
        g = torch.Generator().manual_seed(seed)
        v = lambda shape: values(shape, dtype, None, g).to(device)  # noqa: E731
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((37,)), to(rand_indptr(9, 37, g))), 0, desc="1-D"),
            Sample((v((50, 7)), to(rand_indptr(11, 50, g))), 0, desc="2-D"),
            Sample((v((3, 40, 5)), to(rand_indptr(6, 40, g))), 1, desc="3-D dim 1"),
            Sample((v((4, 30)), to(rand_indptr(5, 30, g))), -1, desc="dim -1"),
            Sample((v((7, 50)).t(), to(rand_indptr(11, 50, g))), 0, desc="non-contiguous"),
            Sample((v((3000, 2)), to(torch.tensor([0, 5, 2500, 3000]))), 0, desc="long segment"),
            Sample((v((0, 3)), to(torch.tensor([0, 0, 0]))), 0, desc="empty src"),
        ]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        v = lambda shape: torch.randn(shape, generator=g, dtype=torch.float64).to(device)  # noqa: E731
        return [
            Sample((v((12, 3)), rand_indptr(5, 12, g).to(device)), 0, desc="2-D"),
            Sample((v((2, 10, 2)), rand_indptr(4, 10, g).to(device)), 1, desc="dim 1"),
        ]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        g = torch.Generator().manual_seed(seed)
        src = values((E, F), dtype, None, g).to(device)
        return Sample((src, rand_indptr(N, E, g).to(device)), 0)

    def value(self, src: Tensor, positions: Tensor, sample: Sample) -> Tensor:
        rows, n = csr_rows(positions, src, src.size(sample.dim))
        return composite_reference.softmax(src, rows.view(-1), sample.dim, n)


ROWS: list[OpRow] = [
    SoftmaxRow("scatter_softmax", FLOATS, cuda_nondet_tol=1e-12),
    SoftmaxRow("scatter_log_softmax", FLOATS, log=True, cuda_nondet_tol=1e-12),
    SoftmaxCsrRow("softmax_csr", FLOATS, cuda_nondet_tol=1e-12),
    LogsumexpRow("scatter_logsumexp", FLOATS, inplace="scatter_logsumexp_", cuda_nondet_tol=1e-12),
    StdRow("scatter_std", FLOATS, cuda_nondet_tol=1e-12),
]
