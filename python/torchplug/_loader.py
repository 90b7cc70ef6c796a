"""Loads plugin libraries into the PyTorch dispatcher."""

from __future__ import annotations

import mmap
import os
import re
import threading
from pathlib import Path

import torch

from ._dynamic_sizes import register_dynamic_sizes

_LIB_DIR = Path(__file__).resolve().parent / "lib"
_CORE = "libtorchplug_core.so"
# Written into every plugin by torchplug_add_plugin (cmake/TorchPlugPlugin.cmake).
_MANIFEST = re.compile(rb"torchplug-plugin;name=(\w+);torch=([\w.]+);torchplug=([\w.]+);")
_RELEASE = re.compile(r"\d+\.\d+\.\d+")
_lock = threading.Lock()
_loaded: dict[Path, str] = {}
_failed: dict[Path, str] = {}


class PluginError(RuntimeError):
    """A plugin library that :func:`torchplug.load_plugin` refused or could not load."""


def load_builtin_plugins() -> None:
    """Loads every ``libtorchplug_<plugin>.so`` shipped in the package."""
    from . import _C  # noqa: F401  (loads libtorchplug_core, which plugins link)

    for library in sorted(_LIB_DIR.glob("libtorchplug_*.so")):
        if library.name != _CORE:
            torch.ops.load_library(str(library))
    register_dynamic_sizes()


def loaded_plugins() -> dict[str, Path]:
    """The plugins :func:`load_plugin` has loaded in this process: name -> library."""
    return {name: path for path, name in _loaded.items()}


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


def _release(version: str) -> str:
    """``"2.11.0"`` of ``"2.11.0+cu130"`` or ``"2.12.0.dev20260101"``."""
    found = _RELEASE.match(version)
    return found.group(0) if found else version


def _check_manifest(path: Path) -> str:
    """The plugin's name, once its manifest says it was built for this torch and torchplug."""
    from ._C import __version__

    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        found = _MANIFEST.search(data)
        fields = None if found is None else [bytes(group).decode() for group in found.groups()]
        del found  # it refers to the mapping, which closes here
    if fields is None:
        raise PluginError(
            f"torchplug.load_plugin: '{path}' is not a torchplug plugin (no manifest: build it with "
            "torchplug_add_plugin from find_package(TorchPlug))"
        )
    name, torch_built, torchplug_built = fields
    if torch_built != _release(torch.__version__):
        raise PluginError(
            f"torchplug.load_plugin: plugin '{name}' ('{path}') was built against torch {torch_built}, "
            f"but this process runs torch {_release(torch.__version__)}: rebuild it against this torch"
        )
    if torchplug_built.split(".")[:2] != __version__.split(".")[:2]:
        raise PluginError(
            f"torchplug.load_plugin: plugin '{name}' ('{path}') was built against torchplug {torchplug_built}, "
            f"but this is torchplug {__version__}: rebuild it against this torchplug"
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
    a torchplug plugin, was built against another torch or torchplug, defines
    an op that is already registered, or registers a kernel that would replace
    another library's. A library that failed stays refused in this process.
    """
    path = _find(plugin)
    with _lock:
        if path in _loaded:
            return _loaded[path]
        if path in _failed:
            raise PluginError(f"{_failed[path]} (it failed earlier in this process; restart it to load the plugin)")
        name = _check_manifest(path)
        for loaded_path, loaded_name in _loaded.items():
            if loaded_name == name:
                raise PluginError(f"torchplug.load_plugin: plugin '{name}' is already loaded, from '{loaded_path}'")
        _guarded_load(path)
        _loaded[path] = name
    register_dynamic_sizes()
    return name


def _guarded_load(path: Path) -> None:
    """Opens the library with its registrations held, then registers them all or none."""
    from . import _C

    _C._begin_guarded_load(str(path))
    try:
        torch.ops.load_library(str(path))
    except BaseException as error:  # a missing symbol, or an interrupt: drop what was held
        _C._abort_guarded_load()
        _failed[path] = f"torchplug.load_plugin: '{path}' could not be loaded: {error!r}"
        if isinstance(error, OSError):
            raise PluginError(_failed[path]) from error
        raise
    try:
        _C._commit_guarded_load()
    except RuntimeError as error:
        _failed[path] = str(error).split("\nException raised from")[0]
        raise PluginError(_failed[path]) from None
