"""Loads the plugin libraries into the PyTorch dispatcher."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ._dynamic_sizes import register_dynamic_sizes

_LIB_DIR = Path(__file__).resolve().parent / "lib"
_CORE = "libtorchplug_core.so"


def load_builtin_plugins() -> None:
    """Loads every ``libtorchplug_<plugin>.so`` shipped in the package."""
    from . import _C  # noqa: F401  (loads libtorchplug_core, which plugins link)

    for library in sorted(_LIB_DIR.glob("libtorchplug_*.so")):
        if library.name != _CORE:
            torch.ops.load_library(str(library))
    register_dynamic_sizes()


def load_plugin(path: str | os.PathLike[str]) -> None:
    """Loads a plugin library built against this package (see ``plugins/``).

    Its ops appear in :func:`torchplug.registry` and under
    ``torch.ops.torchplug`` once loaded.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"torchplug.load_plugin: no library at '{path}'")
    torch.ops.load_library(str(path))
    register_dynamic_sizes()
