"""The scatter family over ``torch.ops.torchplug``, with torch_scatter's
signatures. Each function is TorchScript-able.

Every function reduces the slices of ``src`` along ``dim`` into the slots of
the output named by ``index``::

    out[..., index[i], ...] (op)= src[..., i, ...]

Shapes: ``src`` is ``[*, E, *]`` (``E`` at position ``dim``); ``index`` is
int64, ``[E]`` or any shape that broadcasts to ``src`` (trailing dimensions
added, size-1 dimensions expanded); the output is ``[*, N, *]`` with
``N = dim_size``, or ``out.size(dim)`` when ``out`` is given (then ``out`` is
reduced into in place, its values taking part, and returned), or by default
``index.max() + 1`` (0 when ``src`` or ``index`` is empty). dtypes: float16,
bfloat16 (reduced in float32), float32, float64, int32, int64.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from torchplug._reductions import by_name

__all__ = ["scatter", "scatter_add", "scatter_max", "scatter_mean", "scatter_min", "scatter_mul", "scatter_sum"]


def _check_dim_size(name: str, dim: int, out: Tensor, dim_size: Optional[int]) -> None:
    if dim_size is not None and dim_size != out.size(dim):
        raise ValueError(
            "torchplug." + name + ": dim_size (" + str(dim_size) + ") disagrees with out.size(dim) ("
            + str(out.size(dim)) + ")"
        )


def scatter_sum(
    src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Sums the slices of ``src`` into the slots named by ``index``.

    Returns:
        ``[*, N, *]`` tensor of ``src``'s dtype; empty slots hold 0.
    """
    if out is None:
        return torch.ops.torchplug.scatter_sum(src, index, dim, dim_size)
    _check_dim_size("scatter_sum", dim, out, dim_size)
    torch.ops.torchplug.scatter_sum_(out, src, index, dim)
    return out


def scatter_add(
    src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Alias of :func:`scatter_sum`."""
    return scatter_sum(src, index, dim, out, dim_size)


def scatter_mean(
    src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Averages the slices of ``src`` in each slot: the sum (``out``'s values
    included) over the number of index entries naming the slot, at least 1.
    Integer dtypes floor-divide.

    Returns:
        ``[*, N, *]`` tensor of ``src``'s dtype; empty slots hold 0.
    """
    if out is None:
        return torch.ops.torchplug.scatter_mean(src, index, dim, dim_size)
    _check_dim_size("scatter_mean", dim, out, dim_size)
    torch.ops.torchplug.scatter_mean_(out, src, index, dim)
    return out


def scatter_mul(
    src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """Multiplies the slices of ``src`` in each slot (into ``out``'s values).

    Returns:
        ``[*, N, *]`` tensor of ``src``'s dtype; empty slots hold 1.
    """
    if out is None:
        return torch.ops.torchplug.scatter_mul(src, index, dim, dim_size)
    _check_dim_size("scatter_mul", dim, out, dim_size)
    torch.ops.torchplug.scatter_mul_(out, src, index, dim)
    return out


def scatter_min(
    src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tuple[Tensor, Tensor]:
    """The minimum of each slot's slices, and where it came from.

    NaN wins against any number. With ``out``, its values take part.

    Returns:
        ``(values, arg)``, both ``[*, N, *]``: ``values`` of ``src``'s dtype
        (an empty slot holds 0); ``arg`` int64, the smallest position along
        ``dim`` of a source holding the value, ``E`` for an empty slot or one
        whose value is ``out``'s own.
    """
    if out is None:
        return torch.ops.torchplug.scatter_min(src, index, dim, dim_size)
    _check_dim_size("scatter_min", dim, out, dim_size)
    return out, torch.ops.torchplug.scatter_min_(out, src, index, dim)


def scatter_max(
    src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tuple[Tensor, Tensor]:
    """The maximum of each slot's slices, and where it came from; as
    :func:`scatter_min` otherwise."""
    if out is None:
        return torch.ops.torchplug.scatter_max(src, index, dim, dim_size)
    _check_dim_size("scatter_max", dim, out, dim_size)
    return out, torch.ops.torchplug.scatter_max_(out, src, index, dim)


scatter = by_name(
    globals(), "scatter", "scatter_{}",
    "src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None",
    "src, index, dim, out, dim_size",
    """Reduces the slices of ``src`` into the slots named by ``index``.

    ``reduce`` is ``"sum"`` (or ``"add"``), ``"mean"``, ``"mul"``, ``"min"`` or
    ``"max"`` (the reductions of torchplug._reductions); min and max give their
    values only (see :func:`scatter_max` for the arg). Raises ``ValueError``
    for any other name.
    """,
)
