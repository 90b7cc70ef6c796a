"""edge_attention's op-table row (tests/python/op_table.py): the gat and dot
scores against attention_reference.py in float64, within the composites'
tolerance per dtype; src and dst are the differentiable inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

import torch
from torch import Tensor

from attention_reference import edge_attention_reference
from op_table import FLOATS, TOLERANCE, OpRow, Sample


def score_of(sample: Sample) -> str:
    """gat's src is [N, H], dot's [N, H, C]."""
    return "gat" if sample.inputs[0].dim() == 2 else "dot"


def attention_sample(M: int, N: int, nnz: int, heads: int, width: int, hub: int, score: str, dtype: torch.dtype,
                     device: str, g: torch.Generator) -> Sample:
    """nnz random edges over M rows (`hub` more in row 0), N columns; gat's
    src [N, H] and dst [M, H], dot's [N, H, C] and [M, H, C]."""
    rows = torch.randint(0, max(M, 1), (nnz,), generator=g) if M > 0 else torch.zeros(0, dtype=torch.long)
    rows = torch.cat([torch.zeros(hub if M > 0 else 0, dtype=torch.long), rows]).sort().values
    col = torch.randint(0, N, (rows.numel(),), generator=g)
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows, minlength=M).cumsum(0)])
    shape = (heads,) if score == "gat" else (heads, width)
    src = torch.randn((N,) + shape, generator=g, dtype=torch.float64).to(dtype)
    dst = torch.randn((M,) + shape, generator=g, dtype=torch.float64).to(dtype)
    return Sample(tuple(t.to(device) for t in (src, dst, rowptr, col)), 0,
                  desc=f"{score} M={M} N={N} nnz={rows.numel()} src {list(src.shape)}")


@dataclass
class AttentionRow(OpRow):
    """``edge_attention(rowptr, col, src, dst, score)``."""

    leaf_count: ClassVar[int] = 2

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        src, dst, rowptr, col = inputs
        return fn(rowptr, col, src, dst, score_of(sample))

    def functional_args(self, sample: Sample) -> tuple:
        src, dst, rowptr, col = sample.inputs
        return (rowptr, col, src, dst, score_of(sample))

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        """Both scores over rows of many edges and empty ones, a hub row past
        CUDA's long-row limit, one head and eight, no edges, no rows."""
        g = torch.Generator().manual_seed(seed)
        return [
            attention_sample(30, 20, 90, 4, 1, 0, "gat", dtype, device, g),
            attention_sample(25, 40, 60, 3, 8, 0, "dot", dtype, device, g),
            attention_sample(6, 1200, 40, 8, 1, 1100, "gat", dtype, device, g),
            attention_sample(6, 1200, 40, 2, 16, 1100, "dot", dtype, device, g),
            attention_sample(12, 9, 0, 1, 4, 0, "dot", dtype, device, g),
            attention_sample(0, 5, 0, 2, 1, 0, "gat", dtype, device, g),
        ]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        return [attention_sample(12, 9, 40, 3, 1, 0, "gat", torch.float64, device, g),
                attention_sample(10, 7, 30, 2, 3, 0, "dot", torch.float64, device, g)]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        return attention_sample(N, N, E, 4, max(1, F // 4), 0, "dot", dtype, device,
                                torch.Generator().manual_seed(seed))

    def reference(self, sample: Sample) -> Tensor:
        src, dst, rowptr, col = sample.inputs
        return edge_attention_reference(rowptr, col, src, dst, score_of(sample))

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        context = f"{self.name} {sample!r} {context}"
        src = sample.inputs[0]
        want = self.reference(sample)
        got = outputs[0]
        assert len(outputs) == 1, context
        assert got.dtype == src.dtype and got.device == src.device and got.shape == want.shape, context
        rtol, atol = TOLERANCE[src.dtype]
        torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{context}\n{m}")

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        src, dst, rowptr, col = sample.inputs
        leaves = (src.detach().double().requires_grad_(), dst.detach().double().requires_grad_())
        out = edge_attention_reference(rowptr, col, leaves[0], leaves[1], score_of(sample))
        return torch.autograd.grad(out, leaves, grad.double().cpu())


# Its double backward differentiates softmax_csr, whose backward shares the
# composites' tolerance on CUDA.
ROWS: list[OpRow] = [AttentionRow("edge_attention", FLOATS, cuda_nondet_tol=1e-12)]
