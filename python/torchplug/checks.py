"""Checked mode: whether CUDA kernels validate index values before writing."""

from . import _C


def set_checks(enabled: bool) -> None:
    """Turns checked mode for CUDA kernels on or off, for the whole process.

    With it on, an index value outside the output raises ``IndexError`` naming
    the op and the argument, before anything is written; it costs one pass
    over the index and a device synchronisation per call (docs/reliability.md
    gives the measured cost). With it off (the default), CUDA kernels skip such
    values: nothing is written out of bounds and their gradient is zero. CPU
    kernels always validate. ``TORCHPLUG_CHECKS=1`` in the environment turns it
    on at import.
    """
    _C.set_cuda_checks(bool(enabled))


def checks_enabled() -> bool:
    """Whether checked mode is on for CUDA kernels."""
    return _C.cuda_checks_enabled()
