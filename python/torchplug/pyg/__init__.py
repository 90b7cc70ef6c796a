"""torchplug as PyG's backend: unchanged PyG models run on torchplug's ops.

::

    import torchplug.pyg

    torchplug.pyg.enable()              # process-wide, until disable()
    with torchplug.pyg.enabled():       # or for a block
        loss = model(data.x, data.edge_index).sum()

While it is on:

* ``torch_geometric.utils`` ``scatter`` (every reduction), ``scatter_argmax``,
  ``segment``, ``softmax`` (index and ptr forms) and ``spmm`` (torch.sparse
  adjacencies of any layout, min and max on CUDA too) run torchplug's ops,
  wherever PyG or the user's code imported them: the aggregation modules,
  the global pooling readouts, ``gcn_norm``, the normalisation layers;
  :mod:`torchplug.pyg.functional` says what each hands back to PyG;
* ``EdgeIndex`` sparse-dense products run torchplug's spmm;
* the layers whose messages are ``x_j`` or ``x_j`` times an edge weight
  (GCNConv, SAGEConv, GINConv, GraphConv and the like,
  :data:`torchplug.pyg.fused.FUSED_LAYERS`) run over a plain ``edge_index``
  as one fused spmm, forward and backward, on a CSR cached per graph
  (:mod:`torchplug.pyg.csr_cache`);
* ``GATConv``, ``GATv2Conv`` and ``TransformerConv`` over a plain
  ``edge_index`` run ``torchplug.edge_attention`` and the per-head spmm on
  that CSR, with no E x H x C messages (:mod:`torchplug.pyg.attention`);
* ``NeighborLoader``, ``LinkNeighborLoader``, ``Node2Vec`` and
  ``dropout_path`` sample with ``torchplug.neighbor_sample`` and
  ``torchplug.random_walk``, pyg-lib installed or not
  (:mod:`torchplug.pyg.sampler`).

Results equal PyG's own within floating-point tolerance; min and max pass
their gradient to the first extreme element of a tie, as torch_scatter does.
Under ``torch.compile`` torchplug's ops run inside the graph.
:func:`disable` puts back every object it replaced.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Callable

from . import functional
from ._patch import Log, swap_everywhere, wrapper
from . import sampler
from .attention import ROUTES, routed_forward
from .fused import fused_propagate, messages_of

__all__ = ["disable", "enable", "enabled", "is_enabled"]

_lock = threading.RLock()
_log = Log()
#: (PyG's function, its replacement), while enabled.
_swapped: list[tuple[Callable, Callable]] = []


def _import_pyg():
    try:
        import torch_geometric  # noqa: F401
        import torch_geometric.edge_index
        import torch_geometric.nn
        import torch_geometric.utils._scatter
    except ImportError as error:
        raise ImportError("torchplug.pyg: the PyG backend needs the package 'torch_geometric' "
                          "(pip install torch_geometric)") from error
    return torch_geometric


def _functions(pyg) -> dict[Callable, Callable]:
    """PyG's functions the backend replaces, each with its implementation."""
    utils = pyg.utils
    return {
        utils._scatter.scatter: functional.scatter,
        utils._scatter.scatter_argmax: functional.scatter_argmax,
        utils.segment: functional.segment,
        utils.softmax: functional.softmax,
        utils.spmm: functional.spmm,
        pyg.edge_index._spmm: functional.edge_index_spmm,
    }


def _fuse(cls: type, message_passing: type) -> None:
    """Wraps the ``propagate`` PyG generated for ``cls`` if its layer is fused."""
    propagate = vars(cls).get("propagate")
    generated = f"{cls.__module__}_{cls.__name__}_propagate"
    if (propagate is None or getattr(propagate, "__module__", None) != generated
            or hasattr(propagate, "torchplug_messages")):
        return
    messages = messages_of(cls, message_passing)
    if messages is not None:
        _log.set(cls, "propagate", fused_propagate(propagate, messages))


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def enable() -> None:
    """Routes PyG to torchplug's ops (see the module's docstring), process-wide.

    Raises:
        ImportError: torch_geometric is not installed.
    """
    pyg = _import_pyg()
    with _lock:
        if _swapped:
            return
        _swapped.extend((original, wrapper(original, implementation))
                        for original, implementation in _functions(pyg).items())
        swap_everywhere({id(original): replacement for original, replacement in _swapped})

        message_passing = pyg.nn.MessagePassing
        set_templates = message_passing._set_jittable_templates

        # Classes first instantiated from now on get their propagate here.
        @functools.wraps(set_templates)
        def set_jittable_templates(self, *args, **kwargs):
            set_templates(self, *args, **kwargs)
            with _lock:
                if _swapped:
                    _fuse(type(self), message_passing)

        _log.set(message_passing, "_set_jittable_templates", set_jittable_templates)
        for cls in _subclasses(message_passing):
            _fuse(cls, message_passing)
        for name, route in ROUTES.items():
            cls = getattr(pyg.nn, name)
            _log.set(cls, "forward", routed_forward(cls, cls.forward, route))
        sampler.route(_log)


def disable() -> None:
    """Puts back every object :func:`enable` replaced; harmless when off."""
    with _lock:
        if not _swapped:
            return
        swap_everywhere({id(replacement): original for original, replacement in _swapped})
        _log.restore()
        _swapped.clear()


def is_enabled() -> bool:
    """Whether the backend is on."""
    return bool(_swapped)


@contextlib.contextmanager
def enabled(on: bool = True) -> Iterator[None]:
    """The backend on (or off, with ``on=False``) inside the ``with`` block,
    back as it was after it."""
    before = is_enabled()
    enable() if on else disable()
    try:
        yield
    finally:
        if before != is_enabled():
            enable() if before else disable()
