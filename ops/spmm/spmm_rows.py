"""spmm's op-table rows (tests/python/op_table.py): spmm_<reduce> against
spmm_reference.py in float64, within the composites' tolerance per dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

import torchplug
from op_table import FLOATS, TOLERANCE, OpRow, Sample, values
from spmm_reference import spmm_reference
from torchplug._reductions import implemented


def spmm_sample(M: int, N: int, nnz: int, shape: tuple, hub: int, dtype: torch.dtype, device: str,
                g: torch.Generator, heads: bool = False) -> Sample:
    """spmm's inputs (x [N, *shape], rowptr, col, value): nnz random edges
    over M rows, `hub` more in row 0 (past CUDA's long-row limit); with
    `heads`, value [nnz, shape[0]]: one weight per head."""
    rows = torch.randint(0, max(M, 1), (nnz,), generator=g) if M > 0 else torch.zeros(0, dtype=torch.long)
    rows = torch.cat([torch.zeros(hub if M > 0 else 0, dtype=torch.long), rows]).sort().values
    col = torch.randint(0, N, (rows.numel(),), generator=g)
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows, minlength=M).cumsum(0)])
    x = values((N,) + shape, dtype, None, g)
    value = values((rows.numel(),) + shape[:1] if heads else (rows.numel(),), dtype, None, g)
    return Sample(tuple(t.to(device) for t in (x, rowptr, col, value)), 0,
                  desc=f"M={M} N={N} nnz={rows.numel()} x {list(x.shape)} value {list(value.shape)}")


@dataclass
class SpmmRow(OpRow):
    """``spmm_<reduce>(rowptr, col, value, x)``; the sample's inputs are
    ``(x, rowptr, col, value)``, x first: the differentiable one."""

    reduce: str = "sum"

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        x, rowptr, col, value = inputs
        return fn(rowptr, col, value, x)

    def functional_args(self, sample: Sample) -> tuple:
        x, rowptr, col, value = sample.inputs
        return (rowptr, col, value, x)

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        """Rows of one to many edges and empty ones, x of 1 to 3 dimensions, a
        hub row past CUDA's long-row limit, no edges, no rows, and weights per
        head (with a hub)."""
        g = torch.Generator().manual_seed(seed)
        return [
            spmm_sample(30, 20, 90, (5,), 0, dtype, device, g),
            spmm_sample(25, 40, 60, (), 0, dtype, device, g),
            spmm_sample(10, 7, 40, (3, 4), 0, dtype, device, g),
            spmm_sample(6, 2500, 50, (4,), 3000, dtype, device, g),
            spmm_sample(12, 9, 0, (4,), 0, dtype, device, g),
            spmm_sample(0, 5, 0, (3,), 0, dtype, device, g),
            spmm_sample(20, 15, 70, (4, 3), 0, dtype, device, g, heads=True),
            spmm_sample(6, 1200, 40, (2, 8), 1100, dtype, device, g, heads=True),
        ]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        return [spmm_sample(12, 9, 40, (3,), 0, torch.float64, device, g),
                spmm_sample(6, 8, 20, (2, 2), 1500, torch.float64, device, g),
                spmm_sample(10, 7, 30, (3, 2), 0, torch.float64, device, g, heads=True)]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        return spmm_sample(N, N, E, (F,), 0, dtype, device, torch.Generator().manual_seed(seed))

    def reference(self, sample: Sample) -> tuple[Tensor, Optional[Tensor]]:
        x, rowptr, col, value = sample.inputs
        return spmm_reference(rowptr, col, value, x, self.reduce)

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        context = f"{self.name} {sample!r} {context}"
        x = sample.inputs[0]
        want, want_arg = self.reference(sample)
        got = outputs[0]
        assert got.dtype == x.dtype and got.device == x.device and got.shape == want.shape, context
        rtol, atol = TOLERANCE[x.dtype]
        torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{context}\n{m}")
        if values_only:
            return
        assert len(outputs) == 1 + len(self.args), context
        if self.args and x.dtype == torch.float64:  # float32 products may round a near tie apart
            torch.testing.assert_close(outputs[1].cpu(), want_arg, rtol=0, atol=0,
                                       msg=lambda m: f"{context}: arg\n{m}")

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        x, rowptr, col, value = sample.inputs
        leaf = x.detach().double().requires_grad_()
        return torch.autograd.grad(spmm_reference(rowptr, col, value, leaf, self.reduce)[0], leaf, grad.double())


ROWS: list[OpRow] = [
    SpmmRow(f"spmm_{r.name}", FLOATS, reduce=r.name, args=(1,) if r.arg else ())
    for r in implemented(vars(torchplug), "spmm_{}")
]
