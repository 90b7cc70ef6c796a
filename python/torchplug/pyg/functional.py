"""PyG's low-level functions on torchplug's ops, with PyG's signatures.

Each function here stands in for the PyG function of the same name while the
backend is on (:mod:`torchplug.pyg`). It runs torchplug's op where the op
computes what PyG's function computes and hands everything else (a
reduction or a dtype torchplug has no op for, an input of a kind PyG
converts first) to PyG's own function, ``original``. PyG's functions are
passed in, never imported here, so that this module imports without
torch_geometric.
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional

import torch
from torch import Tensor

from torchplug._reductions import BY_NAME
from torchplug.ops.composite import composite
from torchplug.ops.scatter import scatter as scatter_ops
from torchplug.ops.scatter import segment as segment_ops
from torchplug.ops.spmm import spmm as spmm_ops

#: dtypes torchplug's reductions take.
_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_VALUES = _FLOATING + (torch.int32, torch.int64)

#: PyG's reduction names that are torchplug's under another name.
_PYG_NAMES = {"amin": "min", "amax": "max"}


def _reduction(reduce: str, src: Tensor) -> Optional[str]:
    """torchplug's name for PyG's ``reduce`` on ``src``, or None where PyG's
    function must run: a name torchplug has no op for ("any"), a dtype it
    does not reduce, and integer means (PyG divides them into floats)."""
    name = BY_NAME.get(_PYG_NAMES.get(reduce, reduce))
    if name is None or src.dtype not in _VALUES:
        return None
    if name.name == "mean" and not src.dtype.is_floating_point:
        return None
    return name.name


def _with_pyg_error(op: Callable, *args):
    """``op(*args)``, its IndexError for an index past the output raised as
    the RuntimeError PyG's own path raises there (from torch's scatter), the
    kind PyG's callers catch."""
    try:
        return op(*args)
    except IndexError as error:
        raise RuntimeError(f"{error} (index out of bounds)") from error


def scatter(original: Callable, src: Tensor, index: Tensor, dim: int = 0, dim_size: Optional[int] = None,
            reduce: str = "sum") -> Tensor:
    """``torch_geometric.utils.scatter``: ``src [*, E, *]`` reduced by the 1-D
    ``index [E]`` along ``dim`` into ``[*, dim_size, *]``."""
    name = _reduction(reduce, src) if isinstance(src, Tensor) else None
    if name is None or not isinstance(index, Tensor) or index.dim() != 1 or not -src.dim() <= dim < src.dim():
        return original(src, index, dim, dim_size, reduce)  # PyG raises its errors
    return _with_pyg_error(scatter_ops.scatter, src, index, dim, None, dim_size, name)


def scatter_argmax(original: Callable, src: Tensor, index: Tensor, dim: int = 0,
                   dim_size: Optional[int] = None) -> Tensor:
    """``torch_geometric.utils.scatter_argmax``: for each slot, the position
    along ``dim`` of its largest source (``src.size(dim)`` for an empty slot,
    as torch_scatter gives)."""
    if _reduction("max", src) is None or index.dim() != 1:
        return original(src, index, dim, dim_size)
    return _with_pyg_error(scatter_ops.scatter_max, src, index, dim, None, dim_size)[1]


def segment(original: Callable, src: Tensor, ptr: Tensor, reduce: str = "sum") -> Tensor:
    """``torch_geometric.utils.segment``: ``src`` reduced over the ranges of
    ``ptr [S + 1]`` along its first dimension. PyG's own function takes a
    ``ptr`` of more dimensions only from torch_scatter, and keeps it."""
    name = _reduction(reduce, src)
    if name is None or ptr.dim() != 1:
        return original(src, ptr, reduce)
    return segment_ops.segment_csr(src, ptr, None, name)


def softmax(original: Callable, src: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
            num_nodes: Optional[int] = None, dim: int = 0) -> Tensor:
    """``torch_geometric.utils.softmax``: the softmax of ``src`` within each
    group along ``dim``, the groups given by ``ptr`` (1-D, sorted groups) or
    else by ``index [E]``; ``num_nodes`` groups, by default ``index.max() + 1``.
    PyG adds 1e-16 to each group's sum; torchplug's softmax does not (it
    changes a result by a relative 1e-16 at most, the group's largest term
    being 1). The ptr form along another dimension than the first needs
    torch_scatter in PyG, and stays PyG's."""
    if src.dtype not in _FLOATING:
        return original(src, index, ptr, num_nodes, dim)
    if ptr is not None:
        if ptr.dim() == 1 and dim in (0, -src.dim()):
            return composite.softmax_csr(src, ptr, 0)
        return original(src, index, ptr, num_nodes, dim)
    if ptr is None and index is not None and index.dim() == 1:
        return _with_pyg_error(composite.scatter_softmax, src, index, dim, num_nodes)
    return original(src, index, ptr, num_nodes, dim)


def to_csr(adj: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(rowptr, col, value)`` of a 2-D torch.sparse matrix of any layout,
    int64 (the layouts' int32 indices widened). Converting another layout
    costs a sort each call, which a warning says, as PyG's does."""
    if adj.layout != torch.sparse_csr:
        warnings.warn(f"Converting sparse tensor of layout {adj.layout} to CSR for torchplug's spmm on every "
                      f"call; convert it once with .to_sparse_csr() to skip that", stacklevel=3)
        adj = adj.coalesce().to_sparse_csr() if adj.layout == torch.sparse_coo else adj.to_sparse_csr()
    return adj.crow_indices().long(), adj.col_indices().long(), adj.values()


def spmm(original: Callable, src, other: Tensor, reduce: str = "sum") -> Tensor:
    """``torch_geometric.utils.spmm``: ``src @ other`` reduced by ``reduce``
    ("sum" or "add", "mean", "min", "max"), for a 2-D torch.sparse ``src``
    (CSR, CSC or COO; min and max on CUDA too) and ``other [N, F]``. An
    EdgeIndex goes through :func:`edge_index_spmm`; a torch_sparse
    SparseTensor to PyG."""
    name = BY_NAME.get(reduce)
    if (name is None or not isinstance(src, Tensor) or src.layout == torch.strided
            or src.dim() != 2 or type(src) is not Tensor or other.dtype not in _FLOATING or other.dim() != 2):
        return original(src, other, reduce)
    rowptr, col, value = to_csr(src)
    return spmm_ops.spmm((rowptr, col, value.to(other.dtype)), other, name.name)


def edge_index_spmm(original: Callable, input: Tensor, other: Tensor, value: Optional[Tensor] = None,
                    reduce: str = "sum", transpose: bool = False) -> Tensor:
    """``torch_geometric.edge_index._spmm``: an EdgeIndex sorted by row (by
    column for ``transpose``, which multiplies by its transpose) times
    ``other [N, F]``; ``value [E]`` weighs its edges, in the EdgeIndex's order."""
    name = BY_NAME.get(reduce)
    if name is None or other.dtype not in _FLOATING or other.dim() != 2:
        return original(input, other, value, reduce, transpose)
    if not transpose and not input.is_sorted_by_row or transpose and not input.is_sorted_by_col:
        return original(input, other, value, reduce, transpose)  # PyG raises its own error
    (rowptr, col), perm = input.get_csc() if transpose else input.get_csr()
    if value is not None and perm is not None:
        value = value[perm]
    return spmm_ops.spmm((rowptr.long(), col.long(), value), other, name.name)
