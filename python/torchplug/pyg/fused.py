"""Message passing over a plain ``edge_index`` as one fused spmm.

PyG runs a layer over ``edge_index [2, E]`` as a gather of the E x F
messages ``x_j`` and a scatter of them; only a sparse adjacency takes its
``message_and_aggregate`` path. For a layer whose messages are ``x_j``, or
``x_j`` times a per-edge weight, the two are :func:`torchplug.spmm` over the
graph's CSR (a few of them for variance, standard deviation and
multi-aggregations, :mod:`torchplug.pyg.csr_aggr`): :func:`fused_propagate`
wraps such a class's ``propagate`` to run that, with the CSR (and its
transpose, for x's gradient) from :mod:`torchplug.pyg.csr_cache`. Every call
it cannot run exactly as PyG would goes to PyG's ``propagate``: hooks,
explain mode, decomposed layers, the reverse flow, positional arguments,
sparse inputs, an aggregation module csr_aggr does not know, inputs that are
not ``[N, F]``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from . import csr_aggr
from ._patch import wrapper
from .csr_cache import cache

#: PyG's layers whose message is ``x_j`` (None) or ``x_j`` times the 1-D
#: per-edge weight passed to ``propagate`` under the name given, and whose
#: ``update`` is the identity; a subclass is fused while it keeps both.
FUSED_LAYERS: dict[str, Optional[str]] = {
    "GINConv": None, "MFConv": None, "SAGEConv": None, "SignedConv": None,
    "APPNP": "edge_weight", "ARMAConv": "edge_weight", "ClusterGCNConv": "edge_weight",
    "GatedGraphConv": "edge_weight", "GCN2Conv": "edge_weight", "GCNConv": "edge_weight",
    "GraphConv": "edge_weight", "LGConv": "edge_weight", "MixHopConv": "edge_weight",
    "SGConv": "edge_weight", "SimpleConv": "edge_weight", "SSGConv": "edge_weight", "TAGConv": "edge_weight",
}

_HOOKS = (
    "_propagate_forward_pre_hooks", "_propagate_forward_hooks", "_message_forward_pre_hooks",
    "_message_forward_hooks", "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
    "_message_and_aggregate_forward_pre_hooks", "_message_and_aggregate_forward_hooks",
)


@dataclass(frozen=True)
class MessageForm:
    """What a fused layer's messages are: ``x_j``, times ``weight`` if named."""

    weight: Optional[str]


def messages_of(cls: type, message_passing: type) -> Optional[MessageForm]:
    """The messages of ``cls`` if it is fused: its ``message`` is that of a
    class of :data:`FUSED_LAYERS` and its ``aggregate`` and ``update`` are
    ``message_passing``'s."""
    definer = next(base for base in cls.__mro__ if "message" in vars(base))
    if definer.__module__.split(".")[0] != "torch_geometric" or definer.__name__ not in FUSED_LAYERS:
        return None
    if cls.aggregate is not message_passing.aggregate or cls.update is not message_passing.update:
        return None
    return MessageForm(FUSED_LAYERS[definer.__name__])


def plain_edge_index(edge_index) -> bool:
    """Whether ``edge_index`` is a plain strided integer ``[2, E]`` tensor
    (not a sparse adjacency, an ``EdgeIndex`` or another subclass)."""
    return (type(edge_index) is Tensor and edge_index.layout == torch.strided and edge_index.dim() == 2
            and edge_index.size(0) == 2 and not edge_index.dtype.is_floating_point
            and edge_index.dtype != torch.bool)


def propagates_plainly(layer) -> bool:
    """Whether ``layer`` passes messages as PyG does by default: sources to
    targets, no explain mode, no decomposition, no message-passing hooks."""
    return (layer.flow == "source_to_target" and not layer.explain and layer.decomposed_layers <= 1
            and not any(getattr(layer, hooks) for hooks in _HOOKS))


def _fused(layer, messages: MessageForm, edge_index, size, kwargs: dict) -> Optional[Tensor]:
    """The layer's output through spmm, or None where PyG must run it."""
    if not plain_edge_index(edge_index) or not propagates_plainly(layer):
        return None
    aggregate = csr_aggr.plan(layer.aggr_module)
    x = kwargs.get("x")
    x_src, x_dst = (x[0], x[1]) if isinstance(x, (tuple, list)) and len(x) == 2 else (x, None)
    weight = kwargs.get(messages.weight) if messages.weight is not None else None
    if (aggregate is None or not isinstance(x_src, Tensor) or x_src.dim() != 2 or not x_src.is_floating_point()
            or set(kwargs) - {"x", messages.weight}
            or weight is not None and (not isinstance(weight, Tensor) or weight.dim() != 1)):
        return None
    num_sources = x_src.size(0)
    num_targets = x_dst.size(0) if isinstance(x_dst, Tensor) else num_sources
    if size is not None:
        if size[0] is not None and size[0] != num_sources or isinstance(x_dst, Tensor) and size[1] not in (
                None, num_targets):
            return None  # PyG raises its own error
        num_targets = size[1] if size[1] is not None else num_targets
    csr = cache.get(edge_index, num_targets, num_sources)
    value = None if weight is None else weight.to(x_src.dtype).index_select(0, csr.perm)
    return aggregate(csr_aggr.Messages(csr, x_src, value))


def _propagate(messages: MessageForm, propagate: Callable, self, edge_index, *args, size=None, **kwargs):
    """A fused class's ``propagate``: :func:`_fused`, else PyG's ``propagate``."""
    out = None if args else _fused(self, messages, edge_index, size, kwargs)
    if out is None:
        return propagate(self, edge_index, *args, size=size, **kwargs)
    return out


def fused_propagate(propagate: Callable, messages: MessageForm) -> Callable:
    """``propagate`` (a class's, PyG's) running :func:`_fused` where it can;
    its attribute ``torchplug_messages`` holds ``messages``."""
    fused = wrapper(propagate, functools.partial(_propagate, messages))
    fused.torchplug_messages = messages
    return fused
