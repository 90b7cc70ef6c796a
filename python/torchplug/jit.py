"""Plugins built on first use: the SDK from Python, for notebooks and experiments.

::

    import torchplug

    torchplug.load_inline("myplug", cpp_sources=SOURCE)   # builds once, then loads
    torch.ops.myplug.scale_add(a, b)

A plugin is built with CMake against the installed package
(``find_package(TorchPlug)``, ``torchplug_add_plugin``), exactly as a plugin
project outside the tree is, into a cache directory named by a hash of its
sources and build settings: the second call, or the next process, loads the
library without compiling, and a change to any source builds anew. The cache
is ``$TORCHPLUG_CACHE_DIR`` or ``~/.cache/torchplug``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import torch

from ._C import __version__, with_cuda
from ._loader import PluginError, load_plugin

_CUDA_SUFFIXES = (".cu", ".cuh")
_BUILD_SUFFIXES = (".cmake", ".in", ".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
_HEADER_SUFFIXES = (".h", ".hpp", ".cuh")
_PACKAGE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """Where built plugins are kept: ``$TORCHPLUG_CACHE_DIR`` or ``~/.cache/torchplug``."""
    configured = os.environ.get("TORCHPLUG_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "torchplug"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder of `path` at a time, across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@functools.cache
def _sdk_digest() -> bytes:
    """The installed SDK a plugin is built against: its core library and headers."""
    digest = hashlib.sha256()
    sdk = [_PACKAGE / "lib" / "libtorchplug_core.so", *(_PACKAGE / "lib" / "cmake" / "TorchPlug").glob("*.cmake")]
    sdk += [p for p in (_PACKAGE / "include").rglob("*") if p.suffix in (".h", ".cuh")]
    for path in sorted(sdk):
        digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.digest()


def _fingerprint(files: dict[str, bytes], settings: Sequence[str]) -> str:
    digest = hashlib.sha256(_sdk_digest())
    environment = [os.environ.get(variable, "") for variable in ("TORCH_CUDA_ARCH_LIST", "CXX", "CUDACXX")]
    for part in (__version__, torch.__version__, *environment, *settings):
        digest.update(part.encode() + b"\0")
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name] + b"\0")
    return digest.hexdigest()[:16]


def build_project(
    source_dir: str | os.PathLike[str],
    *,
    cmake_args: Sequence[str] = (),
    verbose: bool = False,
) -> Path:
    """Configures, builds and installs a plugin's CMake project against this package.

    The project calls ``find_package(TorchPlug)`` and ``torchplug_add_plugin``.
    Its install prefix (``lib/``, ``include/``, ``lib/cmake/<name>/``) is
    returned; it is kept in the cache, keyed by the project's CMake and C++/CUDA
    files, and built again only when one changes.
    """
    source_dir = Path(source_dir).resolve()
    files = {
        str(p.relative_to(source_dir)): p.read_bytes()
        for p in sorted(source_dir.rglob("*"))
        if p.is_file()
        and (p.name == "CMakeLists.txt" or p.suffix in _BUILD_SUFFIXES)
        and not _in_build_tree(p.relative_to(source_dir))
    }
    key = _fingerprint(files, [str(source_dir), *cmake_args])
    work = cache_dir() / "projects" / f"{source_dir.name}-{key}"
    prefix = work / "install"
    with _locked(work):
        if not (prefix / ".complete").is_file():
            _cmake(source_dir, work / "build", prefix, cmake_args, verbose, label=source_dir.name)
            (prefix / ".complete").touch()
    return prefix


def _in_build_tree(relative: Path) -> bool:
    """Under a folder a build writes (build/, build-*/, install/) or a hidden one."""
    return any(part in ("build", "install") or part.startswith(("build-", ".")) for part in relative.parts[:-1])


def _cmake(source: Path, build: Path, prefix: Path, cmake_args: Sequence[str], verbose: bool, label: str) -> None:
    print(f"torchplug: building plugin '{label}' in {build.parent} (once; later calls load it)", file=sys.stderr)
    shutil.rmtree(build, ignore_errors=True)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    prefix_path = f"{_PACKAGE};{torch.utils.cmake_prefix_path}"
    steps = [
        ["cmake", "-S", str(source), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_PREFIX_PATH={prefix_path}", f"-DCMAKE_INSTALL_PREFIX={prefix}", *cmake_args],
        ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)],
        ["cmake", "--install", str(build)],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=not verbose, text=True)
        if result.returncode != 0:
            log = (result.stdout or "") + (result.stderr or "")
            raise PluginError(f"torchplug: building plugin '{label}' failed at `{' '.join(step[:2])}`:\n{log[-6000:]}")


def load(
    name: str,
    sources: Sequence[str | os.PathLike[str]],
    *,
    cmake_args: Sequence[str] = (),
    verbose: bool = False,
) -> str:
    """Builds the plugin ``name`` from ``sources`` (``.cpp``; ``.cu`` for CUDA) and loads it.

    The sources use ``torchplug/core`` as an in-tree plugin does (a
    ``TORCHPLUG_LIBRARY`` block for the schemas, ``TORCHPLUG_LIBRARY_IMPL`` for
    the kernels). CUDA sources are compiled where this package was built with
    CUDA kernels (with a warning otherwise). Returns the plugin's name; its ops
    are ``torch.ops.<ns>.<op>``. The cache key covers the sources and the
    files beside them (headers they include), the installed SDK, and the
    ``TORCH_CUDA_ARCH_LIST``, ``CXX`` and ``CUDACXX`` environment variables.

    A process cannot replace a plugin it has loaded (the dispatcher keeps its
    ops): after changing the sources, call again in a new process.
    """
    if not name.isidentifier():
        raise ValueError(f"torchplug.load: name must be an identifier, got '{name}'")
    paths = [Path(s).resolve() for s in sources]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"torchplug.load: no source file '{path}'")
    if any(p.suffix == ".cu" for p in paths) and not with_cuda:
        warnings.warn(f"torchplug.load: this torchplug has no CUDA kernels, so plugin '{name}' is built without "
                      "its .cu sources", stacklevel=2)
    # The sources and the files beside them, which they may include.
    files = {str(p): p.read_bytes() for p in {*paths, *(q for p in paths for q in p.parent.iterdir()
                                                     if q.is_file() and q.suffix in _BUILD_SUFFIXES)}}
    key = _fingerprint(files, [name, *cmake_args])
    work = cache_dir() / "jit" / f"{name}-{key}"
    library = work / "install" / "lib" / f"lib{name}.so"
    with _locked(work):
        if not (work / ".complete").is_file():
            cpp = " ".join(f'"{p}"' for p in paths if p.suffix not in _CUDA_SUFFIXES)
            cuda = " ".join(f'"{p}"' for p in paths if p.suffix == ".cu")
            work.mkdir(parents=True, exist_ok=True)
            (work / "CMakeLists.txt").write_text(
                "cmake_minimum_required(VERSION 3.24)\n"
                f"project({name} LANGUAGES CXX)\n"
                "find_package(TorchPlug REQUIRED)\n"
                f"torchplug_add_plugin({name} SOURCES {cpp}" + (f" CUDA_SOURCES {cuda}" if cuda else "") + ")\n"
            )
            _cmake(work, work / "build", work / "install", cmake_args, verbose, label=name)
            (work / ".complete").touch()
    return load_plugin(library)


def load_inline(
    name: str,
    cpp_sources: str | Sequence[str],
    cuda_sources: str | Sequence[str] = (),
    *,
    headers: Mapping[str, str] | None = None,
    cmake_args: Sequence[str] = (),
    verbose: bool = False,
) -> str:
    """:func:`load` with the sources given as strings (one file per string).

    ``headers`` maps file names to the text of headers the sources share
    (``{"common.h": TEXT}``): they are written beside the sources, which
    include them as ``#include "common.h"``, C++ and CUDA sources alike, and
    they are part of the cache key.
    """
    if isinstance(cpp_sources, str):
        cpp_sources = [cpp_sources]
    if isinstance(cuda_sources, str):
        cuda_sources = [cuda_sources]
    if not name.isidentifier():
        raise ValueError(f"torchplug.load_inline: name must be an identifier, got '{name}'")
    headers = dict(headers or {})
    for filename in headers:
        if Path(filename).name != filename or Path(filename).suffix not in _HEADER_SUFFIXES:
            raise ValueError(f"torchplug.load_inline: plugin '{name}': argument 'headers' takes file names ending in "
                             f"{', '.join(_HEADER_SUFFIXES)}, got '{filename}'")
    sources = {f"{name}_{i}.cpp": s for i, s in enumerate(cpp_sources)}
    sources.update({f"{name}_cuda_{i}.cu": s for i, s in enumerate(cuda_sources)})
    texts = {**headers, **sources}
    key = _fingerprint({k: v.encode() for k, v in texts.items()}, [name])
    sources_dir = cache_dir() / "inline" / f"{name}-{key}"
    with _locked(sources_dir):
        sources_dir.mkdir(parents=True, exist_ok=True)
        for filename, text in texts.items():
            target = sources_dir / filename
            if not target.is_file() or target.read_text() != text:
                target.write_text(text)
    return load(name, [sources_dir / f for f in sources], cmake_args=cmake_args, verbose=verbose)
