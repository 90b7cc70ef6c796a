"""PyG's attention layers over a plain ``edge_index`` on torchplug's
edge attention.

PyG's ``GATConv``, ``GATv2Conv`` and ``TransformerConv`` gather per-edge
scores, take a scatter softmax and scatter the E x H x C messages
``alpha * x_j``. While the backend is on, their ``forward`` runs
:func:`torchplug.edge_attention` (the score, the softmax per row and head,
dropout) and the per-head :func:`torchplug.spmm_sum` over the graph's CSR
from :mod:`torchplug.pyg.csr_cache` (with its self loops replaced by one per
node where the layer adds them): no E x H x C tensor, forward or backward.
The linear maps, the residual, the bias, ``concat`` and TransformerConv's
root weight and beta gate are the layer's own modules and parameters.

A call goes to PyG's ``forward`` wherever the routes would not compute
exactly what it does: edge features, ``return_attention_weights``, an
explicit ``size``, a sparse or ``EdgeIndex`` adjacency, a missing target
side, message-passing hooks, explain mode, a subclass that overrides a step
of the message passing. Dropout draws its mask from the default generator,
as PyG's does, but not the same mask.
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Optional

import torch
from torch import Tensor

from torchplug.ops.attention.attention import edge_attention
from torchplug.ops.spmm import spmm as spmm_ops

from ._patch import wrapper
from .csr_cache import Csr, cache
from .fused import plain_edge_index, propagates_plainly

#: The message-passing steps a routed layer's class must inherit unchanged.
_STEPS = ("propagate", "edge_updater", "edge_update", "message", "aggregate", "message_and_aggregate", "update")


def _pair(x) -> tuple[Optional[Tensor], Optional[Tensor], bool]:
    """``(x_src, x_dst, shared)`` of a layer's ``x``, Nones where it is not
    one or two ``[N, F]`` floating tensors."""
    if isinstance(x, Tensor):
        x = (x, x)
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        return None, None, False
    if not all(isinstance(t, Tensor) and t.dim() == 2 and t.is_floating_point() for t in x):
        return None, None, False
    return x[0], x[1], x[0] is x[1]


def _attend(csr: Csr, src: Tensor, dst: Tensor, values: Tensor, dropout: float, **score) -> Tensor:
    """``[M, H, C]``: each target's values ``[N, H, C]`` summed with the
    attention weights of its edges."""
    transpose = csr.transpose() if torch.is_grad_enabled() else None
    alpha = edge_attention(csr.rowptr, csr.col, src, dst, dropout=dropout, transpose=transpose, **score)
    return spmm_ops.spmm_sum(csr.rowptr, csr.col, alpha, values, transpose)


def _dropout(layer) -> float:
    return layer.dropout if layer.training else 0.0


def _heads(layer, out: Tensor) -> Tensor:
    return out.flatten(1) if layer.concat else out.mean(dim=1)


def _gat_end(layer, edge_index, h_src: Tensor, h_dst: Tensor, src: Tensor, dst: Tensor, res: Optional[Tensor],
             **score) -> Tensor:
    """GATConv's and GATv2Conv's common end: the CSR with the self loops the
    layer adds, the attention of ``score`` over ``h_src [N, H, C]``, the
    heads, the residual and the bias."""
    loops = min(h_src.size(0), h_dst.size(0)) if layer.add_self_loops else None
    csr = cache.get(edge_index, h_dst.size(0), h_src.size(0), loops)
    out = _heads(layer, _attend(csr, src, dst, h_src, _dropout(layer), negative_slope=layer.negative_slope, **score))
    if res is not None:
        out = out + res
    return out + layer.bias if layer.bias is not None else out


def gat(layer, x, edge_index, edge_attr=None, size=None, return_attention_weights=None) -> Optional[Tensor]:
    """GATConv's forward, or None for PyG's."""
    x_src, x_dst, shared = _pair(x)
    if x_src is None or edge_attr is not None or size is not None or return_attention_weights is not None:
        return None
    H, C = layer.heads, layer.out_channels
    res = layer.res(x_dst) if layer.res is not None else None
    lin_src, lin_dst = (layer.lin, layer.lin) if layer.lin is not None else (layer.lin_src, layer.lin_dst)
    h_src = lin_src(x_src).view(-1, H, C)
    h_dst = h_src if shared and lin_src is lin_dst else lin_dst(x_dst).view(-1, H, C)
    score_src = (h_src * layer.att_src).sum(dim=-1)
    score_dst = (h_dst * layer.att_dst).sum(dim=-1)
    return _gat_end(layer, edge_index, h_src, h_dst, score_src, score_dst, res, score="gat")


def gatv2(layer, x, edge_index, edge_attr=None, return_attention_weights=None) -> Optional[Tensor]:
    """GATv2Conv's forward, or None for PyG's."""
    x_src, x_dst, shared = _pair(x)
    if x_src is None or edge_attr is not None or return_attention_weights is not None:
        return None
    H, C = layer.heads, layer.out_channels
    res = layer.res(x_dst) if layer.res is not None else None
    h_src = layer.lin_l(x_src).view(-1, H, C)
    h_dst = h_src if shared and layer.share_weights else layer.lin_r(x_dst).view(-1, H, C)
    return _gat_end(layer, edge_index, h_src, h_dst, h_src, h_dst, res, score="gatv2", att=layer.att.view(H, C))


def transformer(layer, x, edge_index, edge_attr=None, return_attention_weights=None) -> Optional[Tensor]:
    """TransformerConv's forward, or None for PyG's."""
    x_src, x_dst, _ = _pair(x)
    if (x_src is None or edge_attr is not None or layer.lin_edge is not None
            or return_attention_weights is not None):
        return None  # with edge_dim set, PyG's message needs edge_attr (and asserts so)
    H, C = layer.heads, layer.out_channels
    query = layer.lin_query(x_dst).view(-1, H, C)
    key = layer.lin_key(x_src).view(-1, H, C)
    value = layer.lin_value(x_src).view(-1, H, C)
    csr = cache.get(edge_index, query.size(0), key.size(0))
    out = _attend(csr, key, query, value, _dropout(layer), score="dot", scale=1.0 / math.sqrt(C))
    out = _heads(layer, out)
    if layer.root_weight:
        x_r = layer.lin_skip(x_dst)
        if layer.lin_beta is not None:
            beta = layer.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
            out = beta * x_r + (1 - beta) * out
        else:
            out = out + x_r
    return out


#: Each routed PyG layer by class name, with its forward.
ROUTES: dict[str, Callable[..., Optional[Tensor]]] = {
    "GATConv": gat, "GATv2Conv": gatv2, "TransformerConv": transformer,
}


def routed_forward(cls: type, forward: Callable, route: Callable[..., Optional[Tensor]]) -> Callable:
    """``cls.forward`` (PyG's ``forward``) running ``route`` for the calls it
    takes (see the module's docstring)."""
    signature = inspect.signature(forward)
    steps = {name: getattr(cls, name) for name in _STEPS}

    def call(original: Callable, self, *args, **kwargs):
        arguments = signature.bind(self, *args, **kwargs).arguments
        del arguments["self"]
        out = None
        if (plain_edge_index(arguments["edge_index"]) and propagates_plainly(self)
                and all(getattr(type(self), name) is step for name, step in steps.items())):
            out = route(self, **arguments)
        return original(self, *args, **kwargs) if out is None else out

    return wrapper(forward, call)
