"""Elementwise ops over ``torch.ops.torchplug``. TorchScript-able."""

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
