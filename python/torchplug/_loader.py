"""Loads plugin libraries into the PyTorch dispatcher."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from ._dynamic_sizes import register_dynamic_sizes

_LIB_DIR = Path(__file__).resolve().parent / "lib"
_CORE = "libtorchplug_core.so"
# Written into every plugin by torchplug_add_plugin (cmake/TorchPlugPlugin.cmake).
_MANIFEST = re.compile(rb"torchplug-plugin;name=(\w+);torch=([\w.]+);torchplug=([\w.]+);")
_loaded: dict[Path, str] = {}


class PluginError(RuntimeError):
    """A plugin library that :func:`torchplug.load_plugin` refused or could not load."""


def load_builtin_plugins() -> None:
    """Loads every ``libtorchplug_<plugin>.so`` shipped in the package."""
    from . import _C  # noqa: F401  (loads libtorchplug_core, which plugins link)

    for library in sorted(_LIB_DIR.glob("libtorchplug_*.so")):
        if library.name != _CORE:
            torch.ops.load_library(str(library))
    register_dynamic_sizes()


def _find(plugin: str | os.PathLike[str]) -> Path:
    """A path as given, or ``lib<name>.so`` on ``TORCHPLUG_PLUGIN_PATH``."""
    path = Path(plugin)
    if path.suffix == ".so" or os.sep in str(plugin):
        if not path.is_file():
            raise FileNotFoundError(f"torchplug.load_plugin: no library at '{path}'")
        return path.resolve()
    dirs = [d for d in os.environ.get("TORCHPLUG_PLUGIN_PATH", "").split(os.pathsep) if d]
    for directory in dirs:
        for candidate in (Path(directory) / f"lib{plugin}.so", Path(directory) / "lib" / f"lib{plugin}.so"):
            if candidate.is_file():
                return candidate.resolve()
    raise FileNotFoundError(
        f"torchplug.load_plugin: no lib{plugin}.so in TORCHPLUG_PLUGIN_PATH ({os.pathsep.join(dirs) or 'unset'})"
    )


def _check_manifest(path: Path) -> str:
    """The plugin's name, once its manifest says it was built for this torch."""
    found = _MANIFEST.search(path.read_bytes())
    if found is None:
        raise PluginError(
            f"torchplug.load_plugin: '{path}' is not a torchplug plugin (no manifest: build it with "
            "torchplug_add_plugin from find_package(TorchPlug))"
        )
    name, built_for, _ = (group.decode() for group in found.groups())
    running = torch.__version__.split("+")[0]
    if built_for != running:
        raise PluginError(
            f"torchplug.load_plugin: plugin '{name}' ('{path}') was built against torch {built_for}, "
            f"but this process runs torch {running}: rebuild it against this torch"
        )
    return name


def load_plugin(plugin: str | os.PathLike[str]) -> str:
    """Loads a plugin library built with the SDK (``torchplug_add_plugin``).

    ``plugin`` is a path to the library or a plugin name, looked up as
    ``lib<name>.so`` in the directories of ``TORCHPLUG_PLUGIN_PATH`` (and their
    ``lib/``). Its ops are then listed by :func:`torchplug.registry` and callable
    as ``torch.ops.<namespace>.<op>``. Loading the same library again does
    nothing. Returns the plugin's name.

    Raises :class:`PluginError`, and registers nothing, when the library is not
    a torchplug plugin, was built against another torch, or defines an op that
    is already registered.
    """
    path = _find(plugin)
    if path in _loaded:
        return _loaded[path]
    name = _check_manifest(path)
    for loaded_path, loaded_name in _loaded.items():
        if loaded_name == name:
            raise PluginError(f"torchplug.load_plugin: plugin '{name}' is already loaded, from '{loaded_path}'")
    from . import _C

    _C._begin_guarded_load()
    try:
        torch.ops.load_library(str(path))
    except OSError as error:
        _C._abort_guarded_load()
        raise PluginError(f"torchplug.load_plugin: '{path}' could not be loaded: {error}") from error
    try:
        _C._commit_guarded_load(str(path))
    except RuntimeError as error:
        raise PluginError(str(error).split("\nException raised from")[0]) from None
    _loaded[path] = name
    register_dynamic_sizes()
    return name
