"""Segments and gathers over ``torch.ops.torchplug``, with torch_scatter's
signatures. Each function is TorchScript-able.

The reduced dimension is the last of the positions tensor: ``dim =
indptr.dim() - 1`` (csr) or ``index.dim() - 1`` (coo); its leading sizes are
``src``'s or 1.

* ``segment_*_csr(src, indptr)``: ``out[..., i, ...]`` reduces
  ``src[..., indptr[i]:indptr[i + 1], ...]``. ``indptr`` is int64 ``[..., N + 1]``,
  starting at 0, never decreasing, ending at most at ``src.size(dim)``; the
  output is ``[*, N, *]``. With ``out`` it is written there (overwritten).
* ``segment_*_coo(src, index)``: ``scatter_*`` along ``dim`` with an index
  sorted along its last dimension; ``N = dim_size``, ``out.size(dim)`` (then
  ``out``'s values take part, as in scatter) or ``index.max() + 1``.
* ``gather_csr(src, indptr)``: the inverse of a csr segment: position ``j`` of
  the output (``[*, E, *]``, ``E = indptr[..., -1]`` by default) holds
  ``src[..., i, ...]`` for ``indptr[i] <= j < indptr[i + 1]``, 0 past the last
  segment. ``gather_coo(src, index)``: position ``j`` holds
  ``src[..., index[..., j], ...]`` (any order).

An empty segment holds 0 (mul: 1), and for min and max its arg ``src.size(dim)``.
dtypes: float16, bfloat16 (reduced in float32), float32, float64, int32, int64.
Differentiable in ``src`` (not through their ``out=`` forms, but for
``segment_*_coo``, which reduces into ``out`` as scatter does).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from torchplug._reductions import by_name

__all__ = [
    "gather_coo", "gather_csr", "segment_add_coo", "segment_add_csr", "segment_coo", "segment_csr",
    "segment_max_coo", "segment_max_csr", "segment_mean_coo", "segment_mean_csr", "segment_min_coo",
    "segment_min_csr", "segment_mul_coo", "segment_mul_csr", "segment_sum_coo", "segment_sum_csr",
]


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Sums each segment of ``src``: ``[*, N, *]``; an empty one holds 0."""
    if out is None:
        return torch.ops.torchplug.segment_sum_csr(src, indptr)
    torch.ops.torchplug.segment_sum_csr_(out, src, indptr)
    return out


def segment_add_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Alias of :func:`segment_sum_csr`."""
    return segment_sum_csr(src, indptr, out)


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Averages each segment (integers floor-divide): ``[*, N, *]``; an empty one holds 0."""
    if out is None:
        return torch.ops.torchplug.segment_mean_csr(src, indptr)
    torch.ops.torchplug.segment_mean_csr_(out, src, indptr)
    return out


def segment_mul_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Multiplies each segment: ``[*, N, *]``; an empty one holds 1."""
    if out is None:
        return torch.ops.torchplug.segment_mul_csr(src, indptr)
    torch.ops.torchplug.segment_mul_csr_(out, src, indptr)
    return out


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The minimum of each segment (NaN wins) and its arg: the smallest
    position along ``dim`` holding it, ``src.size(dim)`` for an empty segment
    (whose value is 0). Both ``[*, N, *]``."""
    if out is None:
        return torch.ops.torchplug.segment_min_csr(src, indptr)
    return out, torch.ops.torchplug.segment_min_csr_(out, src, indptr)


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The maximum of each segment and its arg; as :func:`segment_min_csr` otherwise."""
    if out is None:
        return torch.ops.torchplug.segment_max_csr(src, indptr)
    return out, torch.ops.torchplug.segment_max_csr_(out, src, indptr)


segment_csr = by_name(
    globals(), "segment_csr", "segment_{}_csr",
    "src: Tensor, indptr: Tensor, out: Optional[Tensor] = None", "src, indptr, out",
    """Any csr segment reduction by name: ``"sum"`` (or ``"add"``), ``"mean"``,
    ``"mul"``, ``"min"``, ``"max"`` (values only); ``ValueError`` otherwise.
    """,
)


def _check_dim_size(name: str, index: Tensor, out: Tensor, dim_size: Optional[int]) -> None:
    dim = index.dim() - 1
    if dim_size is not None and dim >= 0 and out.dim() > dim and dim_size != out.size(dim):
        raise ValueError(
            "torchplug." + name + ": dim_size (" + str(dim_size) + ") disagrees with out.size(dim) ("
            + str(out.size(dim)) + ")"
        )


def segment_sum_coo(
    src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Sums the runs of a sorted ``index``: ``[*, N, *]``; an empty slot holds 0
    (with ``out``, its values take part)."""
    if out is None:
        return torch.ops.torchplug.segment_sum_coo(src, index, dim_size)
    _check_dim_size("segment_sum_coo", index, out, dim_size)
    torch.ops.torchplug.segment_sum_coo_(out, src, index)
    return out


def segment_add_coo(
    src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Alias of :func:`segment_sum_coo`."""
    return segment_sum_coo(src, index, out, dim_size)


def segment_mean_coo(
    src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Averages the runs of a sorted ``index`` (as :func:`torchplug.scatter_mean`)."""
    if out is None:
        return torch.ops.torchplug.segment_mean_coo(src, index, dim_size)
    _check_dim_size("segment_mean_coo", index, out, dim_size)
    torch.ops.torchplug.segment_mean_coo_(out, src, index)
    return out


def segment_mul_coo(
    src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Multiplies the runs of a sorted ``index``; an empty slot holds 1."""
    if out is None:
        return torch.ops.torchplug.segment_mul_coo(src, index, dim_size)
    _check_dim_size("segment_mul_coo", index, out, dim_size)
    torch.ops.torchplug.segment_mul_coo_(out, src, index)
    return out


def segment_min_coo(
    src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tuple[Tensor, Tensor]:
    """The minimum of each run of a sorted ``index`` and its arg (as
    :func:`torchplug.scatter_min`)."""
    if out is None:
        return torch.ops.torchplug.segment_min_coo(src, index, dim_size)
    _check_dim_size("segment_min_coo", index, out, dim_size)
    return out, torch.ops.torchplug.segment_min_coo_(out, src, index)


def segment_max_coo(
    src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tuple[Tensor, Tensor]:
    """The maximum of each run of a sorted ``index`` and its arg (as
    :func:`torchplug.scatter_max`)."""
    if out is None:
        return torch.ops.torchplug.segment_max_coo(src, index, dim_size)
    _check_dim_size("segment_max_coo", index, out, dim_size)
    return out, torch.ops.torchplug.segment_max_coo_(out, src, index)


segment_coo = by_name(
    globals(), "segment_coo", "segment_{}_coo",
    "src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None",
    "src, index, out, dim_size",
    """Any coo segment reduction by name, as :func:`segment_csr`.
    """,
)


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Copies slice ``i`` of ``src`` (``[*, N, *]``) to positions
    ``indptr[i]:indptr[i + 1]``: ``[*, E, *]``, ``E = out.size(dim)`` or
    ``indptr``'s last value; 0 past the last segment."""
    if out is None:
        return torch.ops.torchplug.gather_csr(src, indptr)
    torch.ops.torchplug.gather_csr_(out, src, indptr)
    return out


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Copies slice ``index[..., j]`` of ``src`` to position ``j``: ``[*, E, *]``
    with ``E = index.size(-1)``."""
    if out is None:
        return torch.ops.torchplug.gather_coo(src, index)
    torch.ops.torchplug.gather_coo_(out, src, index)
    return out
