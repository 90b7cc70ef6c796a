"""The scatter family's composites over ``torch.ops.torchplug``, each one
fused op with torch_scatter's signature. Each function is TorchScript-able.

Shapes: ``src`` is ``[*, E, *]`` (``E`` at position ``dim``), float16,
bfloat16 (both computed in float32), float32 or float64; ``index`` is int64,
``[E]`` or any shape that broadcasts to ``src``; ``N`` groups, ``dim_size``
or by default ``index.max() + 1``. Index values outside ``[0, N)`` raise on
the CPU and, on CUDA, in checked mode (:func:`torchplug.set_checks`);
outside it such a source belongs to no group. Every function is
differentiable in ``src``.
"""

from typing import Optional

import torch
from torch import Tensor

__all__ = ["scatter_log_softmax", "scatter_logsumexp", "scatter_softmax", "scatter_std", "softmax_csr"]


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    """Softmax of ``src`` within each group: ``exp(src - max) / sum(exp(src - max))``.

    A group of -inf values alone gives 0; a NaN makes its group NaN, as in
    :func:`torch.softmax`.

    Returns:
        tensor of ``src``'s shape and dtype.
    """
    return torch.ops.torchplug.scatter_softmax(src, index, dim, dim_size)


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    """Log-softmax of ``src`` within each group: ``src - max - log(sum(exp(src - max)))``.

    Returns:
        tensor of ``src``'s shape and dtype; -inf for a group of -inf values.
    """
    return torch.ops.torchplug.scatter_log_softmax(src, index, dim, dim_size)


def scatter_logsumexp(
    src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None
) -> Tensor:
    """``log(sum(exp(src)))`` of each group, computed stably.

    With ``out``, reduces into it in place (its value takes part as one more
    source; an empty group keeps it) and returns it; that form is not
    differentiable.

    Returns:
        ``[*, N, *]`` tensor of ``src``'s dtype; 0 for an empty group.
    """
    if out is None:
        return torch.ops.torchplug.scatter_logsumexp(src, index, dim, dim_size)
    if dim_size is not None and dim_size != out.size(dim):
        raise ValueError("torchplug.scatter_logsumexp: dim_size (" + str(dim_size)
                         + ") disagrees with out.size(dim) (" + str(out.size(dim)) + ")")
    torch.ops.torchplug.scatter_logsumexp_(out, src, index, dim)
    return out


def scatter_std(
    src: Tensor,
    index: Tensor,
    dim: int = -1,
    out: Optional[Tensor] = None,
    dim_size: Optional[int] = None,
    unbiased: bool = True,
) -> Tensor:
    """Standard deviation of each group (Welford's form), over ``count - 1``
    (``unbiased``) or ``count``, at least 1.

    With ``out``, the result is written into it and returned.

    Returns:
        ``[*, N, *]`` tensor of ``src``'s dtype; 0 for an empty group.
    """
    if out is None:
        return torch.ops.torchplug.scatter_std(src, index, dim, dim_size, unbiased)
    if out.dim() != src.dim():
        raise RuntimeError("torchplug::scatter_std: argument 'out' has " + str(out.dim())
                           + " dimensions, src " + str(src.dim()))
    if dim_size is not None and dim_size != out.size(dim):
        raise ValueError("torchplug.scatter_std: dim_size (" + str(dim_size)
                         + ") disagrees with out.size(dim) (" + str(out.size(dim)) + ")")
    result = torch.ops.torchplug.scatter_std(src, index, dim, out.size(dim), unbiased)
    if out.dtype != result.dtype or out.shape != result.shape:
        raise RuntimeError("torchplug::scatter_std: argument 'out' of shape " + str(list(out.shape)) + " and dtype "
                           + str(out.dtype) + " does not match the expected " + str(list(result.shape)) + " and "
                           + str(result.dtype))
    return out.copy_(result)


def softmax_csr(src: Tensor, indptr: Tensor, dim: int = 0) -> Tensor:
    """Softmax of ``src`` within each sorted group ``indptr[i] .. indptr[i + 1]``
    along ``dim`` (pyg-lib's ``softmax_csr``).

    Args:
        indptr: int64 ``[N + 1]``, starting at 0, never decreasing, ending at
            ``src.size(dim)``.

    Returns:
        tensor of ``src``'s shape and dtype.
    """
    return torch.ops.torchplug.softmax_csr(src, indptr, dim)
