"""Attention over a graph's edges without the E x H x C messages, over
``torch.ops.torchplug``: the normalised weights of each row's edges, per
head, which :func:`torchplug.spmm_sum` multiplies into the messages with
``value`` of ``[nnz, H]``.

For a CSR adjacency (``rowptr`` int64 ``[M + 1]``, ``col`` int64 ``[nnz]``
with values in ``[0, N)``) and an edge ``k`` from column ``c = col[k]`` to
row ``r``, three score functions (``act`` is leaky_relu with
``negative_slope``; 1 gives the identity)::

    "gat"    act(src[c, h] + dst[r, h])                     src [N, H], dst [M, H]
    "gatv2"  sum_i att[h, i] * act(src[c, h, i] + dst[r, h, i])
                                                            src [N, H, C], dst [M, H, C], att [H, C]
    "dot"    scale * dst[r, h] . src[c, h]                  src (keys) [N, H, C], dst (queries) [M, H, C]

then the softmax over each row's edges per head (a -inf score leaves its edge
out, a row of -inf scores gets zeros, a NaN poisons its row only), then
dropout. A GAT layer::

    alpha = torchplug.edge_attention(rowptr, col, a_src, a_dst, dropout=0.6 if training else 0.0)
    out = torchplug.spmm_sum(rowptr, col, alpha, h)          # h [N, H, C] -> [M, H, C]
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["edge_attention"]


def edge_attention(rowptr: Tensor, col: Tensor, src: Tensor, dst: Tensor, score: str = "gat",
                   att: Optional[Tensor] = None, negative_slope: float = 0.2, scale: float = 1.0,
                   dropout: float = 0.0, generator: Optional[torch.Generator] = None,
                   transpose: Optional[Tuple[Tensor, Tensor, Tensor]] = None) -> Tensor:
    """The attention weights ``[nnz, H]`` of the CSR's edges: ``score`` per edge
    and head (see the module), softmax over each row's edges, and with
    ``dropout`` p > 0 each weight kept with probability 1 - p (drawn from
    ``generator``, or the default one) and scaled by 1 / (1 - p); pass 0
    outside training. Differentiable in ``src``, ``dst`` and ``att``;
    ``transpose`` (:func:`torchplug.spmm_transpose` of the adjacency with
    ``src.size(0)`` columns) saves building it for src's gradient."""
    colptr, row, perm = (None, None, None) if transpose is None else transpose
    return torch.ops.torchplug.edge_attention(rowptr, col, src, dst, score, att, negative_slope, scale, dropout,
                                              generator, colptr, row, perm)
