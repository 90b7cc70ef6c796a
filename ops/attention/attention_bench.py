"""edge_attention's benchmark workloads: a GAT and a graph-transformer
training step built on edge_attention and the multi-head spmm, against
PyG's GATConv and TransformerConv on the same parameters (where
torch_geometric is installed), and the multi-head spmm against the scalar
spmm on the same bytes."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug
from torchplug.bench.candidates import TORCHPLUG, Candidate, Lineup
from torchplug.bench.workloads import Scale, count_label

#: The reference of the step workloads.
PYG = "PyG"


def random_graph(n: int, e: int, device: torch.device, generator: torch.Generator) -> Tensor:
    """``edge_index [2, ~e]``: uniform random edges without self loops (PyG's
    GATConv removes them before adding its own)."""
    edge_index = torch.randint(0, n, (2, e), generator=generator)
    return edge_index[:, edge_index[0] != edge_index[1]].to(device)


def csr_of(edge_index: Tensor, n: int, self_loops: bool) -> tuple[Tensor, Tensor]:
    """``(rowptr, col)`` of the edges ``src -> dst`` grouped by dst (rows), a
    loop per node added when asked."""
    src, dst = edge_index
    if self_loops:
        loops = torch.arange(n, device=src.device)
        src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
    order = torch.argsort(dst, stable=True)
    rowptr = torch.cat([dst.new_zeros(1), torch.bincount(dst, minlength=n).cumsum(0)])
    return rowptr, src[order]


def gat_conv(conv, x: Tensor, rowptr: Tensor, col: Tensor, transpose) -> Tensor:
    """PyG ``GATConv``'s forward (one linear map, concat, no edge features)
    on its own parameters, through edge_attention and the multi-head spmm."""
    H, C = conv.heads, conv.out_channels
    h = conv.lin(x).view(-1, H, C)
    a_src = (h * conv.att_src).sum(-1)
    a_dst = (h * conv.att_dst).sum(-1)
    alpha = torchplug.edge_attention(rowptr, col, a_src, a_dst, "gat", negative_slope=conv.negative_slope,
                                     dropout=conv.dropout if conv.training else 0.0, transpose=transpose)
    out = torchplug.spmm_sum(rowptr, col, alpha, h, transpose=transpose)
    out = out.flatten(1) if conv.concat else out.mean(1)
    return out if conv.bias is None else out + conv.bias


def transformer_conv(conv, x: Tensor, rowptr: Tensor, col: Tensor, transpose) -> Tensor:
    """PyG ``TransformerConv``'s forward (concat, root weight, no beta, no
    edge features) on its own parameters: the dot score, then the spmm."""
    H, C = conv.heads, conv.out_channels
    q = conv.lin_query(x).view(-1, H, C)
    k = conv.lin_key(x).view(-1, H, C)
    v = conv.lin_value(x).view(-1, H, C)
    alpha = torchplug.edge_attention(rowptr, col, k, q, "dot", scale=1 / math.sqrt(C),
                                     dropout=conv.dropout if conv.training else 0.0, transpose=transpose)
    out = torchplug.spmm_sum(rowptr, col, alpha, v, transpose=transpose)
    out = out.flatten(1) if conv.concat else out.mean(1)
    return out + conv.lin_skip(x) if conv.root_weight else out


LAYERS = {"gat": ("GATConv", gat_conv, True), "transformer": ("TransformerConv", transformer_conv, False)}


@dataclass(frozen=True)
class AttentionStepWorkload:
    """One training step (forward, cross-entropy, every parameter's gradient)
    of two attention layers of ``heads`` x ``width`` over ``N`` nodes and
    ``E`` random edges (gat: plus a self loop each), ``F`` input features:
    torchplug's ops against the PyG layers on the same parameters."""

    op: ClassVar[str] = "attention"
    layer: str
    e: int
    f: int
    n: int
    heads: int
    width: int

    @property
    def name(self) -> str:
        return (f"{self.layer} train step E={count_label(self.e)} F={self.f} N={count_label(self.n)} "
                f"H={self.heads} C={self.width}")

    @property
    def terms_per_output(self) -> float:
        return max(1.0, self.e / self.n) * self.f

    def min_bytes(self) -> int:
        """Each layer's per-head weights and its messages' gather, forward and backward (float32)."""
        return 4 * 2 * self.e * (2 * self.heads * self.width + self.heads)

    def params(self) -> dict[str, object]:
        return {"layer": self.layer, "E": self.e, "F": self.f, "N": self.n, "H": self.heads, "C": self.width}

    def lineup(self, device: torch.device) -> Lineup:
        from torch_geometric import nn as gnn

        name, forward, self_loops = LAYERS[self.layer]
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(self.n, self.f, generator=generator).to(device)
        edge_index = random_graph(self.n, self.e, device, generator)
        classes = self.heads * self.width
        y = torch.randint(0, classes, (self.n,), generator=generator).to(device)
        torch.manual_seed(0)
        layer = getattr(gnn, name)
        convs = torch.nn.ModuleList([layer(self.f, self.width, heads=self.heads),
                                     layer(classes, self.width, heads=self.heads)]).to(device)
        params = list(convs.parameters())
        rowptr, col = csr_of(edge_index, self.n, self_loops)
        transpose = torchplug.spmm_transpose(rowptr, col, self.n)

        def step(layer_forward) -> Tensor:
            out = layer_forward(convs[1], layer_forward(convs[0], x).relu())
            torch.autograd.grad(torch.nn.functional.cross_entropy(out, y), params)
            return out.detach()

        ours = lambda conv, h: forward(conv, h, rowptr, col, transpose)  # noqa: E731
        theirs = lambda conv, h: conv(h, edge_index)  # noqa: E731
        return Lineup((Candidate(TORCHPLUG, lambda: step(ours), "edge_attention + spmm_sum, transpose cached"),
                       Candidate(PYG, lambda: step(theirs), f"torch_geometric {name}")), reference=PYG)


@dataclass(frozen=True)
class HeadsSpmmWorkload:
    """spmm_sum with weights per head (value ``[E, H]``, x ``[N, H, C]``)
    against the scalar spmm over the same ``E x (H * C)`` bytes: each head's
    weights equal, so that both give the same result."""

    op: ClassVar[str] = "attention"
    e: int
    n: int
    heads: int
    width: int

    @property
    def name(self) -> str:
        return f"spmm_sum per head E={count_label(self.e)} N={count_label(self.n)} H={self.heads} C={self.width}"

    @property
    def terms_per_output(self) -> float:
        return max(1.0, self.e / self.n)

    def min_bytes(self) -> int:
        """x gathered once per edge, the weights and col read, the output written."""
        return 4 * (self.e + self.n) * self.heads * self.width + (8 + 4 * self.heads) * self.e

    def params(self) -> dict[str, object]:
        return {"E": self.e, "N": self.n, "H": self.heads, "C": self.width}

    def lineup(self, device: torch.device) -> Lineup:
        generator = torch.Generator().manual_seed(0)
        row = torch.randint(0, self.n, (self.e,), generator=generator).sort().values.to(device)
        col = torch.randint(0, self.n, (self.e,), generator=generator).to(device)
        rowptr = torch.cat([row.new_zeros(1), torch.bincount(row, minlength=self.n).cumsum(0)])
        value = torch.rand(self.e, generator=generator).to(device)
        per_head = value.unsqueeze(1).expand(-1, self.heads).contiguous()
        x = torch.randn(self.n, self.heads, self.width, generator=generator).to(device)
        flat = x.view(self.n, -1)

        def gathered() -> Tensor:
            messages = x.index_select(0, col) * per_head.unsqueeze(-1)
            return x.new_zeros(x.shape).index_add_(0, row, messages)

        return Lineup((Candidate(TORCHPLUG, lambda: torchplug.spmm_sum(rowptr, col, per_head, x), "value [E, H]"),
                       Candidate("torchplug scalar", lambda: torchplug.spmm_sum(rowptr, col, value, flat).view(
                           x.shape), "value [E], x [N, H * C]: the same bytes"),
                       Candidate("index_select + index_add_", gathered)), reference="index_select + index_add_")


def workloads(scale: Scale) -> tuple:
    """On a GPU: the GAT step at N=500K, E=5M, 8 heads of 8; the transformer
    step with 4 heads of 16; the per-head spmm at H=8, C=8. On a CPU: the
    same at the scale's sizes. The steps need torch_geometric."""
    steps = importlib.util.find_spec("torch_geometric") is not None
    if scale.gpu:
        m = 1_000_000
        found = [HeadsSpmmWorkload(10 * m, m, 8, 8)]
        if steps:
            found += [AttentionStepWorkload("gat", 5 * m, 128, 500_000, 8, 8),
                      AttentionStepWorkload("transformer", 5 * m, 128, 500_000, 4, 16)]
        return tuple(found)
    n = max(64, scale.n // 4)
    found = [HeadsSpmmWorkload(scale.e, scale.n, 8, 8)]
    if steps:
        found += [AttentionStepWorkload("gat", 10 * n, 64, n, 8, 8),
                  AttentionStepWorkload("transformer", 10 * n, 64, n, 4, 16)]
    return tuple(found)
