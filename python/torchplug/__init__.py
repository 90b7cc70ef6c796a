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
from .composite import (  # noqa: E402
    scatter_log_softmax,
    scatter_logsumexp,
    scatter_softmax,
    scatter_std,
    softmax_csr,
)
from .functional import add  # noqa: E402
from .jit import load, load_inline  # noqa: E402
from .registry import OpInfo, registry  # noqa: E402
from .scatter import (  # noqa: E402
    scatter,
    scatter_add,
    scatter_max,
    scatter_mean,
    scatter_min,
    scatter_mul,
    scatter_sum,
)
from .spmm import sddmm, spmm, spmm_max, spmm_mean, spmm_min, spmm_sum, spmm_transpose  # noqa: E402
from .segment import (  # noqa: E402
    gather_coo,
    gather_csr,
    segment_add_coo,
    segment_add_csr,
    segment_coo,
    segment_csr,
    segment_max_coo,
    segment_max_csr,
    segment_mean_coo,
    segment_mean_csr,
    segment_min_coo,
    segment_min_csr,
    segment_mul_coo,
    segment_mul_csr,
    segment_sum_coo,
    segment_sum_csr,
)

#: Directory to put on ``CMAKE_PREFIX_PATH`` for ``find_package(TorchPlug)``.
cmake_prefix_path: str = str(Path(__file__).resolve().parent)

__all__ = [
    "OpInfo",
    "PluginError",
    "__version__",
    "add",
    "checked",
    "checks_enabled",
    "cmake_prefix_path",
    "gather_coo",
    "gather_csr",
    "load",
    "load_inline",
    "load_plugin",
    "loaded_plugins",
    "registry",
    "scatter",
    "scatter_add",
    "scatter_log_softmax",
    "scatter_logsumexp",
    "scatter_max",
    "scatter_mean",
    "scatter_min",
    "scatter_mul",
    "scatter_softmax",
    "scatter_std",
    "scatter_sum",
    "segment_add_coo",
    "segment_add_csr",
    "segment_coo",
    "segment_csr",
    "segment_max_coo",
    "segment_max_csr",
    "segment_mean_coo",
    "segment_mean_csr",
    "segment_min_coo",
    "segment_min_csr",
    "segment_mul_coo",
    "segment_mul_csr",
    "segment_sum_coo",
    "segment_sum_csr",
    "sddmm",
    "set_checks",
    "softmax_csr",
    "spmm",
    "spmm_max",
    "spmm_mean",
    "spmm_min",
    "spmm_sum",
    "spmm_transpose",
    "validates_indices",
    "with_cuda",
]


def __getattr__(name: str):
    """Ops of the torchplug namespace loaded at run time are ``torchplug.<name>`` too."""
    if any(info.namespace == "torchplug" and info.name == name for info in registry()):
        return getattr(torch.ops.torchplug, name)
    raise AttributeError(f"module 'torchplug' has no attribute '{name}'")
