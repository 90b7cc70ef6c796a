"""PyG's aggregation modules evaluated over a graph's CSR.

A fused layer's messages are ``x_j`` or ``w * x_j``, so what PyG's
aggregation modules compute of them is a few spmm over the CSR, with no E x F
messages: sum, mean, min and max are one each; PyG's variance is the mean of
the squared messages (``w^2`` times ``x^2``) less the squared mean, its
standard deviation that clamped and rooted as PyG does; a multi-aggregation
concatenates its parts. :func:`plan` reads a layer's ``aggr_module`` once
and returns the evaluation, or None for any module it does not know exactly
(a subclass, one with hooks, another combine mode), which PyG then runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from torchplug.ops.spmm import spmm as spmm_ops

from .csr_cache import Csr

#: PyG's std aggregation clamps the variance to this before the root, and
#: zeroes a result at or under the clamp's root (torch_geometric.nn.aggr.basic).
_STD_CLAMP = 1e-5

#: The aggregation modules that are one spmm, with its reduction.
_SPMM = {"SumAggregation": "sum", "MeanAggregation": "mean", "MinAggregation": "min", "MaxAggregation": "max"}


@dataclass
class Messages:
    """A layer's messages over ``csr``: ``value[k] * x[col[k]]`` (value in
    CSR order, or None for weights of 1). Each reduction of them is computed
    once per call: a multi-aggregation's mean and its std's mean are one."""

    csr: Csr
    x: Tensor
    value: Optional[Tensor]
    _done: dict[tuple[str, bool, bool], Tensor] = field(default_factory=dict, repr=False)

    def spmm(self, reduce: str, squared: bool = False) -> Tensor:
        """``reduce`` of each row's messages (of their squares with ``squared``)."""
        key = (reduce, squared, torch.is_grad_enabled())  # a semi_grad variance's no-grad mean is its own
        if key not in self._done:
            x = self.x * self.x if squared else self.x
            value = self.value * self.value if squared and self.value is not None else self.value
            needs_transpose = reduce in ("sum", "mean") and torch.is_grad_enabled() and x.requires_grad
            transpose = self.csr.transpose() if needs_transpose else None
            self._done[key] = spmm_ops.spmm((self.csr.rowptr, self.csr.col, value), x, reduce, transpose)
        return self._done[key]


def _variance(messages: Messages, semi_grad: bool) -> Tensor:
    mean = messages.spmm("mean")
    if semi_grad:
        with torch.no_grad():
            mean_of_squares = messages.spmm("mean", squared=True)
    else:
        mean_of_squares = messages.spmm("mean", squared=True)
    return mean_of_squares - mean * mean


def _deviation(messages: Messages, semi_grad: bool) -> Tensor:
    out = _variance(messages, semi_grad).clamp(min=_STD_CLAMP).sqrt()
    return out.masked_fill(out <= math.sqrt(_STD_CLAMP), 0.0)


def plan(aggr: Optional[torch.nn.Module]) -> Optional[Callable[[Messages], Tensor]]:
    """The evaluation of PyG's aggregation module ``aggr`` over messages, or None."""
    if aggr is None or type(aggr).__module__.split(".")[:3] != ["torch_geometric", "nn", "aggr"]:
        return None
    if aggr._forward_hooks or aggr._forward_pre_hooks:
        return None
    kind = type(aggr).__name__
    if kind in _SPMM:
        reduce = _SPMM[kind]
        return lambda messages: messages.spmm(reduce)
    if kind == "VarAggregation":
        return lambda messages: _variance(messages, aggr.semi_grad)
    if kind == "StdAggregation":
        return lambda messages: _deviation(messages, aggr.var_aggr.semi_grad)
    if kind == "MultiAggregation" and (aggr.mode == "cat" or len(aggr.aggrs) == 1):
        parts = [plan(part) for part in aggr.aggrs]
        if any(part is None for part in parts):
            return None
        if len(parts) == 1:
            return parts[0]
        return lambda messages: torch.cat([part(messages) for part in parts], dim=-1)
    return None
