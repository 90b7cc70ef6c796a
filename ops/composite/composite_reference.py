"""Plain-PyTorch references for the composites in float64 (softmax,
log_softmax, logsumexp, std over the groups an index names), written with
scatter_reduce, scatter_add and gather, differentiable (their autograd is the
gradient reference), with the special values of docs/ops.md: an all -inf
group gives softmax 0 and log_softmax -inf, an empty group logsumexp 0 and
std 0; a source whose index names no group gives 0 (log_softmax -inf).
ops/composite/test_composite.py checks the ops against torch.softmax and
friends group by group as well."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from index_reference import broadcast_index, default_dim_size

INF = float("inf")


def _groups(src: Tensor, index: Tensor, dim: int, n: Optional[int]):
    """(x, rows, inside, n, reduced shape): src in float64, the broadcast
    index clamped into [0, n) where inside is False."""
    dim %= src.dim()
    n = default_dim_size(index, src, dim) if n is None else n
    full = broadcast_index(index, src, dim).to(src.device)
    inside = (full >= 0) & (full < n)
    shape = list(src.shape)
    shape[dim] = n
    return src.double(), torch.where(inside, full, 0), inside, n, shape


def _max_exp_sum(x: Tensor, rows: Tensor, inside: Tensor, dim: int, shape: list):
    """Each group's maximum (-inf when empty) and sum of exp(x - max), and the
    maximum gathered back to the sources."""
    masked = torch.where(inside, x, -INF)
    top = torch.full(shape, -INF, dtype=x.dtype, device=x.device).scatter_reduce(dim, rows, masked, "amax")
    top_at = top.gather(dim, rows)
    e = torch.where(top_at == -INF, 0.0, (masked - top_at).exp())
    total = torch.zeros(shape, dtype=x.dtype, device=x.device).scatter_add(dim, rows, torch.where(inside, e, 0.0))
    return top, total, top_at, e


def softmax(src: Tensor, index: Tensor, dim: int, n: Optional[int] = None, log: bool = False) -> Tensor:
    x, rows, inside, n, shape = _groups(src, index, dim, n)
    dim %= src.dim()
    top, total, top_at, e = _max_exp_sum(x, rows, inside, dim, shape)
    total_at = total.gather(dim, rows)
    empty = top_at == -INF
    if log:
        value = torch.where(empty, -INF, x - top_at - total_at.log())
        return torch.where(inside, value, -INF)
    value = torch.where(empty, 0.0, e / torch.where(empty, 1.0, total_at))
    return torch.where(inside, value, 0.0)


def logsumexp(src: Tensor, index: Tensor, dim: int, n: Optional[int] = None, out: Optional[Tensor] = None) -> Tensor:
    if out is not None:
        n = out.size(dim)
    x, rows, inside, n, shape = _groups(src, index, dim, n)
    top, total, _, _ = _max_exp_sum(x, rows, inside, dim % src.dim(), shape)
    raw = torch.where(top == INF, INF, top + total.log())  # -inf for an empty group
    if out is not None:
        return torch.logaddexp(out.double(), raw)
    return torch.where(top == -INF, 0.0, raw)


def std(src: Tensor, index: Tensor, dim: int, n: Optional[int] = None, unbiased: bool = True) -> Tensor:
    x, rows, inside, n, shape = _groups(src, index, dim, n)
    dim %= src.dim()
    zeros = torch.zeros(shape, dtype=x.dtype, device=x.device)
    count = zeros.scatter_add(dim, rows, inside.double())
    mean = zeros.scatter_add(dim, rows, torch.where(inside, x, 0.0)) / count.clamp(min=1)
    deviation = torch.where(inside, x - mean.gather(dim, rows), 0.0)
    m2 = zeros.scatter_add(dim, rows, deviation * deviation)
    divisor = (count - 1 if unbiased else count).clamp(min=1)
    variance = m2 / divisor
    # sqrt's derivative at 0 is infinite; the ops give a group of equal values
    # a zero gradient (sqrt of 1 in the branch not taken keeps it finite).
    flat = variance == 0
    return torch.where(flat, 0.0, torch.where(flat, 1.0, variance).sqrt())
