"""Sparse-dense matrix products with a reduction (torch_sparse's spmm) over
``torch.ops.torchplug``: message passing without materialising the E x F
messages.

For a CSR adjacency of ``M`` rows -- ``rowptr`` int64 ``[M + 1]``, ``col``
int64 ``[nnz]`` (values in ``[0, N)``), ``value`` ``[nnz]`` of x's dtype or
None (weights of 1) -- and ``x`` ``[N, *]`` (float16, bfloat16, float32,
float64)::

    out[r] = reduce over the edges k of row r of value[k] * x[col[k]]     # [M, *]

A ``value`` of ``[nnz, H]`` weighs each head of ``x [N, H, *]`` apart
(multi-head attention), without the E x H x C messages::

    out[r, h] = reduce over k of value[k, h] * x[col[k], h]               # [M, H, *]

An empty row holds 0. Differentiable in ``x`` and ``value``. The per-reduction
functions are TorchScript-able; :func:`spmm` also takes a
``torch.sparse_csr_tensor`` adjacency.

x's gradient is a product with the transposed adjacency, which backward
builds on every call. A caller that multiplies by the same adjacency again
(a GNN layer every step) builds it once with :func:`spmm_transpose` and
passes it as ``transpose``; its shapes are checked always, its index ranges
on the CPU and in checked mode; that it belongs to ``(rowptr, col)`` is the
caller's promise::

    t = torchplug.spmm_transpose(rowptr, col, x.size(0))
    out = torchplug.spmm_sum(rowptr, col, value, x, transpose=t)
"""

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from torchplug._reductions import by_name

__all__ = ["sddmm", "spmm", "spmm_max", "spmm_mean", "spmm_min", "spmm_sum", "spmm_transpose"]

Transpose = Tuple[Tensor, Tensor, Tensor]


def _parts(transpose: Optional[Transpose]) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """The ops' colptr, row and perm arguments: None when no transpose is given."""
    if transpose is None:
        return None, None, None
    return transpose[0], transpose[1], transpose[2]


def spmm_transpose(rowptr: Tensor, col: Tensor, num_cols: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The CSR's transpose (CSC) for ``num_cols`` columns: ``(colptr [num_cols
    + 1], row [nnz], perm [nnz])``, each column's edges in increasing CSR
    position (``perm``), built on the device without atomics."""
    return torch.ops.torchplug.spmm_transpose(rowptr, col, num_cols)


def spmm_sum(rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor,
             transpose: Optional[Tuple[Tensor, Tensor, Tensor]] = None) -> Tensor:
    """``A @ x``: the sum of each row's weighted messages. Returns ``[M, *]``."""
    colptr, row, perm = _parts(transpose)
    return torch.ops.torchplug.spmm_sum(rowptr, col, value, x, colptr, row, perm)


def spmm_mean(rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor,
              transpose: Optional[Tuple[Tensor, Tensor, Tensor]] = None) -> Tensor:
    """The sum over the row's number of edges. Returns ``[M, *]``."""
    colptr, row, perm = _parts(transpose)
    return torch.ops.torchplug.spmm_mean(rowptr, col, value, x, colptr, row, perm)


def spmm_min(rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor,
             transpose: Optional[Tuple[Tensor, Tensor, Tensor]] = None) -> Tuple[Tensor, Tensor]:
    """(values, arg): the smallest weighted message of each row (NaN wins) and
    the edge holding it (the first such; ``nnz`` for an empty row). Its
    gradient needs no transpose: one given is checked and left unused."""
    colptr, row, perm = _parts(transpose)
    return torch.ops.torchplug.spmm_min(rowptr, col, value, x, colptr, row, perm)


def spmm_max(rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor,
             transpose: Optional[Tuple[Tensor, Tensor, Tensor]] = None) -> Tuple[Tensor, Tensor]:
    """(values, arg): the largest weighted message of each row, as :func:`spmm_min`."""
    colptr, row, perm = _parts(transpose)
    return torch.ops.torchplug.spmm_max(rowptr, col, value, x, colptr, row, perm)


def sddmm(rowptr: Tensor, col: Tensor, a: Tensor, b: Tensor, mean: bool = False,
          transpose: Optional[Tuple[Tensor, Tensor, Tensor]] = None, heads: int = 1) -> Tensor:
    """Per-edge dot products ``a[row(k)] . b[col(k)]`` (over the row's edge
    count with ``mean``), ``[nnz]``: value's gradient of :func:`spmm_sum` (or
    :func:`spmm_mean`) without the E x F messages. ``a [M, *]``, ``b [N, *]``;
    differentiable in both (b's gradient runs over ``transpose``, built unless
    given). With ``heads=H`` (``a [M, H, *]``, ``b [N, H, *]``) one product per
    head, ``[nnz, H]``: a multi-head value's gradient, attention's ``q . k``."""
    colptr, row, perm = _parts(transpose)
    return torch.ops.torchplug.sddmm(rowptr, col, a, b, mean, colptr, row, perm, heads)


_spmm_by_name = by_name(
    globals(), "_spmm_by_name", "spmm_{}",
    "rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor, transpose: Optional[Transpose]",
    "rowptr, col, value, x, transpose", "spmm_<reduce> of a (rowptr, col, value) adjacency.", caller="torchplug.spmm")


def spmm(adj: Union[Tensor, Tuple[Tensor, Tensor, Optional[Tensor]]], x: Tensor, reduce: str = "sum",
         transpose: Optional[Transpose] = None) -> Tensor:
    """``reduce`` ("sum" or "add", "mean", "min", "max") of each row's weighted
    messages; ``adj`` is a ``torch.sparse_csr_tensor`` (its values are the
    weights) or a ``(rowptr, col, value)`` tuple. min and max give their
    values only. ``transpose``: :func:`spmm_transpose` of the adjacency, for
    x's gradient (sum and mean)."""
    if isinstance(adj, Tensor):
        if adj.layout != torch.sparse_csr:
            raise TypeError(f"torchplug.spmm: argument 'adj' must be a sparse CSR tensor or (rowptr, col, value), "
                            f"got a tensor of layout {adj.layout}")
        if adj.size(1) != x.size(0):
            raise ValueError(f"torchplug.spmm: argument 'adj' of shape {list(adj.shape)} does not match x of "
                             f"shape {list(x.shape)}: adj.size(1) must be x.size(0)")
        # int32 indices (torch's CSR allows them) are widened: the ops take int64.
        rowptr, col, value = adj.crow_indices().long(), adj.col_indices().long(), adj.values()
    else:
        rowptr, col, value = adj
    return _spmm_by_name(rowptr, col, value, x, transpose, reduce)
