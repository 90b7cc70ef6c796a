"""The add family over ``torch.ops.torchplug``: elementwise ``a + b``. TorchScript-able."""

import torch
from torch import Tensor

__all__ = ["add"]


def add(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise ``a + b`` with broadcasting and type promotion.

    Args:
        a: tensor of any shape.
        b: tensor broadcastable with ``a``, on the same device.

    Returns:
        Tensor of the broadcast shape and the promoted dtype.
    """
    return torch.ops.torchplug.add(a, b)
