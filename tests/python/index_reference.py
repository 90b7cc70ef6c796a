"""How an index or indptr addresses its slots (docs/ops.md), shared by the
families' references: the broadcast of an index to src, the default output
size, and the segment of each position by indptr."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


def broadcast_index(index: torch.Tensor, src: torch.Tensor, dim: int) -> torch.Tensor:
    """torch_scatter's index broadcast, written out (docs/ops.md): a 1-D index
    is laid along ``dim``; missing trailing dimensions are appended; size-1
    dimensions are expanded to src's sizes."""
    dim = dim % src.dim()
    if index.dim() == 1:
        index = index.view([1] * dim + [-1])
    while index.dim() < src.dim():
        index = index.unsqueeze(-1)
    return index.expand(src.shape)


def default_dim_size(index: torch.Tensor, src: torch.Tensor, dim: int) -> int:
    """docs/ops.md (torch_scatter's rule): ``max + 1`` over the index broadcast
    to src, so 0 when src or the index is empty."""
    full = broadcast_index(index, src, dim)
    return int(full.max()) + 1 if full.numel() > 0 else 0


def csr_rows(indptr: Tensor, src: Tensor, positions: Optional[int] = None) -> tuple[Tensor, int]:
    """(rows, N): the segment of each of `positions` (src.size(dim) by
    default) by indptr ([..., N + 1], leading sizes src's or 1), N past the last
    segment; rows is [src's leading sizes..., positions], on indptr's device."""
    d = indptr.dim() - 1
    n = max(indptr.size(-1) - 1, 0)
    E = src.size(d) if positions is None else positions
    lead = list(src.shape[:d])
    flat = indptr.expand(lead + [indptr.size(-1)]).reshape(-1, indptr.size(-1)).cpu()
    rows = []
    for bounds in flat:
        row = torch.repeat_interleave(torch.arange(n), bounds.diff()) if n > 0 else torch.zeros(0, dtype=torch.long)
        rows.append(torch.cat([row, torch.full((E - row.numel(),), n)]))
    return torch.stack(rows).view(lead + [E]).to(indptr.device), n
