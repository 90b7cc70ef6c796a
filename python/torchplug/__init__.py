"""torchplug: PyTorch operators written in C++ and CUDA, in the style of PyG.

Every op is registered with the PyTorch dispatcher, so it is callable as
``torch.ops.torchplug.<name>`` (eager, TorchScript, ``torch.compile``) and
through the friendly functions here::

    import torchplug
    out = torchplug.scatter(src, index, dim=0, reduce="sum")

``torchplug.registry()`` lists every op with its schema, plugin and backends.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ._loader import PluginError, load_builtin_plugins, load_plugin, loaded_plugins

load_builtin_plugins()

from ._C import __version__, with_cuda  # noqa: E402
from .checks import checked, checks_enabled, set_checks, validates_indices  # noqa: E402
from .jit import load, load_inline  # noqa: E402
from .ops import family_modules  # noqa: E402
from .registry import OpInfo, registry  # noqa: E402

#: Directory to put on ``CMAKE_PREFIX_PATH`` for ``find_package(TorchPlug)``.
cmake_prefix_path: str = str(Path(__file__).resolve().parent)

__all__ = [
    "OpInfo",
    "PluginError",
    "__version__",
    "checked",
    "checks_enabled",
    "cmake_prefix_path",
    "load",
    "load_inline",
    "load_plugin",
    "loaded_plugins",
    "registry",
    "set_checks",
    "validates_indices",
    "with_cuda",
]

# Every op family's friendly functions (ops/<family>/*.py, installed as
# torchplug.ops.<family>), and each module by its name where no function has
# it (torchplug.composite, torchplug.segment).
for _module in family_modules():
    for _name in _module.__all__:
        if _name in globals():
            raise ImportError(f"torchplug: '{_name}' of {_module.__name__} is defined twice")
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
    globals().setdefault(_module.__name__.rsplit(".", 1)[-1], _module)
__all__.sort()
del _module, _name


def __getattr__(name: str):
    """Ops of the torchplug namespace loaded at run time are ``torchplug.<name>`` too."""
    if any(info.namespace == "torchplug" and info.name == name for info in registry()):
        return getattr(torch.ops.torchplug, name)
    raise AttributeError(f"module 'torchplug' has no attribute '{name}'")
