"""The plain-PyTorch reference of edge_attention, in float64 on the CPU: the
per-edge scores from rows gathered by ``col`` (the source) and by the row of
each edge (the destination), then a softmax over each row's edges per head
written with scatter_reduce and scatter_add. Differentiable in src, dst and
att, so that autograd of it gives the reference gradients. Used by
ops/attention/test_attention.py."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

SCORES = ("gat", "gatv2", "dot")


def edge_rows(rowptr: Tensor, nnz: int) -> Tensor:
    """The row of every edge of the CSR, [nnz] int64 on the CPU."""
    return torch.repeat_interleave(rowptr.cpu().diff(), output_size=nnz)


def scores_reference(rowptr: Tensor, col: Tensor, src: Tensor, dst: Tensor, score: str,
                     att: Optional[Tensor] = None, negative_slope: float = 0.2, scale: float = 1.0) -> Tensor:
    """The scores [nnz, H] before the softmax, in float64 on the CPU."""
    col = col.cpu()
    row = edge_rows(rowptr, col.numel())
    keys, queries = src.double().cpu()[col], dst.double().cpu()[row]
    if score == "gat":
        return F.leaky_relu(keys + queries, negative_slope)
    if score == "gatv2":
        return (F.leaky_relu(keys + queries, negative_slope) * att.double().cpu()).sum(-1)
    if score == "dot":
        return scale * (queries * keys).sum(-1)
    raise ValueError(f"score must be one of {SCORES}, got {score!r}")


def row_softmax_reference(rowptr: Tensor, scores: Tensor) -> Tensor:
    """Softmax of scores [nnz, H] over each row's edges, per head: a -inf
    score weighs 0, a row of only -inf scores gets zeros, a NaN makes its own
    row NaN."""
    M, (nnz, H) = rowptr.numel() - 1, scores.shape
    row = edge_rows(rowptr, nnz)
    index = row.view(-1, 1).expand(-1, H)
    # The shift does not change the softmax, so it carries no gradient.
    peak = torch.full((M, H), float("-inf"), dtype=scores.dtype).scatter_reduce(
        0, index, scores.detach(), "amax", include_self=True)
    peak = torch.where(peak == float("-inf"), torch.zeros_like(peak), peak)  # rows of -inf only
    e = torch.exp(scores - peak[row])
    total = torch.zeros(M, H, dtype=scores.dtype).scatter_add(0, index, e)
    # A row of -inf only sums to 0 (0 / 1 = 0 there); a NaN row stays NaN.
    total = torch.where(total > 0, total, torch.ones_like(total))
    return e / total[row]


def edge_attention_reference(rowptr: Tensor, col: Tensor, src: Tensor, dst: Tensor, score: str,
                             att: Optional[Tensor] = None, negative_slope: float = 0.2,
                             scale: float = 1.0) -> Tensor:
    """The attention weights [nnz, H] in float64 on the CPU (no dropout: apply
    a mask to the result), differentiable in src, dst and att."""
    s = scores_reference(rowptr, col, src, dst, score, att, negative_slope, scale)
    return row_softmax_reference(rowptr, s)


def layer_reference(rowptr: Tensor, col: Tensor, alpha: Tensor, x: Tensor) -> Tensor:
    """out[r, h] = sum over row r's edges k of alpha[k, h] * x[col[k], h]
    ([M, H, C], float64 on the CPU): the messages gathered, weighed and
    added row by row with index_add."""
    M, col = rowptr.numel() - 1, col.cpu()
    messages = alpha.double().cpu().unsqueeze(-1) * x.double().cpu()[col]
    out = torch.zeros((M,) + tuple(x.shape[1:]), dtype=torch.float64)
    return out.index_add(0, edge_rows(rowptr, col.numel()), messages)
