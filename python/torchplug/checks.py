"""Checked mode: whether CUDA kernels validate index values before writing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from . import _C


def set_checks(enabled: bool) -> None:
    """Turns checked mode for CUDA kernels on or off, for the whole process.

    With it on, an index value outside the output raises ``IndexError`` naming
    the op and the argument, before anything is written; it costs one pass
    over the index and a device synchronisation per call (docs/reliability.md
    gives the measured cost). With it off (the default), CUDA kernels skip such
    values: nothing is written out of bounds and their gradient is zero. CPU
    kernels always validate. ``TORCHPLUG_CHECKS`` in the environment sets it
    at import: ``1``, ``true``, ``yes`` or ``on`` turn it on, ``0``,
    ``false``, ``no`` or ``off`` (or unset, or empty) leave it off, in any
    case; any other value makes ``import torchplug`` raise ``ValueError``.
    """
    _C.set_cuda_checks(bool(enabled))


def checks_enabled() -> bool:
    """Whether checked mode is on for CUDA kernels."""
    return _C.cuda_checks_enabled()


@contextlib.contextmanager
def checked(enabled: bool = True) -> Iterator[None]:
    """Checked mode set to ``enabled`` inside the ``with`` block, restored after it.

    The mode is process-wide: other threads see it too while the block runs.
    """
    before = checks_enabled()
    set_checks(enabled)
    try:
        yield
    finally:
        set_checks(before)


def validates_indices(device: torch.device | str) -> bool:
    """Whether ops on ``device`` validate index values before writing, raising
    ``IndexError`` on a bad one: always on the CPU, on CUDA in checked mode.
    Otherwise CUDA kernels skip such values."""
    return _C.validates_indices(str(torch.device(device)))


# Read TORCHPLUG_CHECKS now, so that a value that is not a boolean fails the
# import with a message naming it instead of the first CUDA call.
checks_enabled()
