"""Friendly functions over ``torch.ops.torchplug``. Each is TorchScript-able."""

from typing import Optional

import torch
from torch import Tensor


def add(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise ``a + b`` with broadcasting and type promotion.

    Args:
        a: tensor of any shape.
        b: tensor broadcastable with ``a``, on the same device.

    Returns:
        Tensor of the broadcast shape and the promoted dtype.
    """
    return torch.ops.torchplug.add(a, b)


def scatter_sum(
    src: Tensor,
    index: Tensor,
    dim: int = -1,
    out: Optional[Tensor] = None,
    dim_size: Optional[int] = None,
) -> Tensor:
    """Sums the slices of ``src`` into the slots of the output named by ``index``.

    ``out[..., index[i], ...] += src[..., i, ...]`` along ``dim``, with
    torch_scatter's semantics.

    Args:
        src: ``[*, E, *]`` tensor (``E`` at position ``dim``); float16,
            bfloat16, float32, float64, int32 or int64.
        index: int64; ``[E]``, or any shape that broadcasts to ``src``
            (trailing dimensions added, size-1 dimensions expanded).
        dim: the dimension of ``src`` to reduce; negative counts from the end.
        out: ``[*, N, *]`` tensor to accumulate into in place; returned.
        dim_size: ``N`` when ``out`` is not given; defaults to
            ``index.max() + 1`` (0 for an empty index).

    Returns:
        ``[*, N, *]`` tensor of ``src``'s dtype.
    """
    if out is None:
        return torch.ops.torchplug.scatter_sum(src, index, dim, dim_size)
    if dim_size is not None and dim_size != out.size(dim):
        raise ValueError(
            "torchplug.scatter_sum: dim_size (" + str(dim_size) + ") disagrees with out.size(dim) ("
            + str(out.size(dim)) + ")"
        )
    torch.ops.torchplug.scatter_sum_(out, src, index, dim)
    return out


def scatter(
    src: Tensor,
    index: Tensor,
    dim: int = -1,
    out: Optional[Tensor] = None,
    dim_size: Optional[int] = None,
    reduce: str = "sum",
) -> Tensor:
    """Reduces the slices of ``src`` into the slots named by ``index``.

    Same arguments as :func:`scatter_sum`; ``reduce`` picks the reduction.
    Only ``"sum"`` (alias ``"add"``) exists today; ``"mean"``, ``"max"``,
    ``"min"`` and ``"mul"`` raise ``NotImplementedError``.
    """
    if reduce == "sum" or reduce == "add":
        return scatter_sum(src, index, dim, out, dim_size)
    raise NotImplementedError(
        "torchplug.scatter: reduce='" + reduce + "' is not implemented yet; supported: 'sum'"
    )
