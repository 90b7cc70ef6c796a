"""Plain-PyTorch pieces of the scatter_sum reference shared by the test suites
(ops/scatter/ and tests/python/; pyproject.toml puts this directory on the
path): the index broadcast and default output size of docs/ops.md, and the
float spacing the tolerances are written in."""

from __future__ import annotations

import torch


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


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` at |x| (float64), subnormal spacing below the normal
    range. frexp gives the exponent exactly (log2 may round up just below a
    power of two)."""
    info = torch.finfo(dtype)
    x = x.to(torch.float64).abs().clamp_min(info.tiny)
    _, exponent = torch.frexp(x)
    return info.eps * torch.pow(2.0, (exponent - 1).to(torch.float64))
