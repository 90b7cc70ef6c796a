"""Trains a two-layer graph transformer (Shi et al., IJCAI 2021; PyG's
TransformerConv) built from torchplug ops.

Each layer attends over each node's incoming edges ``j -> i`` per head with
the scaled dot product ``q_i . k_j / sqrt(C)``, normalised per node and head
by ``torchplug.edge_attention(..., "dot")``; the multi-head
``torchplug.spmm_sum`` sums the weighted values ``v_j`` into their nodes,
and a skip connection adds ``W_skip x_i``. Neither op builds an E x H x C
tensor. The graph is a CSR of incoming edges, built once with its
transpose, which both ops' gradients run over.

The tasks are examples/gcn.py's: the karate club (default; six labelled
nodes, scored on all 34, exit status 1 under :data:`MIN_KARATE_ACC`) or
``--synthetic N``.

    python examples/transformer.py [--device cpu|cuda] [--epochs 200] [--heads 4] [--seed 0]
    python examples/transformer.py --synthetic 100000
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import torchplug
from gcn import common_parser, csr_by_destination, make_task, positive_int, train

#: The karate run fails when its final accuracy on all nodes is below this.
MIN_KARATE_ACC: float = 0.8


class Csr(NamedTuple):
    """Each node's incoming edges as CSR rows: ``rowptr [N + 1]``, ``col
    [E]`` (the sources), and the transpose for the gradients."""

    rowptr: Tensor
    col: Tensor
    transpose: Tuple[Tensor, Tensor, Tensor]


def incoming(edge_index: Tensor, num_nodes: int) -> Csr:
    rowptr, col, _ = csr_by_destination(edge_index[0], edge_index[1], num_nodes)
    return Csr(rowptr, col, torchplug.spmm_transpose(rowptr, col, num_nodes))


class TransformerConv(nn.Module):
    """One attention layer: ``[N, in_features] -> [N, heads * out_features]``
    (``concat``) or ``[N, out_features]`` (the heads averaged), plus the skip."""

    def __init__(self, in_features: int, out_features: int, heads: int, concat: bool = True,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.out_features, self.concat, self.dropout = heads, out_features, concat, dropout
        self.query = nn.Linear(in_features, heads * out_features)
        self.key = nn.Linear(in_features, heads * out_features)
        self.value = nn.Linear(in_features, heads * out_features)
        self.skip = nn.Linear(in_features, heads * out_features if concat else out_features)

    def forward(self, x: Tensor, csr: Csr) -> Tensor:
        q, k, v = (lin(x).view(-1, self.heads, self.out_features) for lin in (self.query, self.key, self.value))
        alpha = torchplug.edge_attention(csr.rowptr, csr.col, k, q, "dot", scale=1 / math.sqrt(self.out_features),
                                         dropout=self.dropout if self.training else 0.0,
                                         transpose=csr.transpose)                   # [E, H]
        out = torchplug.spmm_sum(csr.rowptr, csr.col, alpha, v, transpose=csr.transpose)  # [N, H, C]
        out = out.flatten(1) if self.concat else out.mean(1)
        return out + self.skip(x)


class GraphTransformer(nn.Module):
    """Two attention layers with ELU and dropout: ``[N, F] -> [N, C]`` logits."""

    def __init__(self, in_features: int, hidden: int, heads: int, num_classes: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.conv1 = TransformerConv(in_features, hidden, heads, dropout=0.1)
        self.conv2 = TransformerConv(hidden * heads, num_classes, 1, concat=False)
        self.dropout = dropout

    def forward(self, x: Tensor, csr: Csr) -> Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = F.elu(self.conv1(x, csr))
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(x, csr)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Command-line options; see the module docstring."""
    parser = common_parser(__doc__.split("\n\n")[0], hidden=16, lr=0.005)
    parser.add_argument("--heads", type=positive_int, default=4)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Trains, prints one line per epoch (with its step time) and a final line; returns the exit status."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    task = make_task(args.synthetic, args.seed, device)
    csr = incoming(task.graph.edge_index, task.graph.num_nodes)
    model = GraphTransformer(task.x.size(1), args.hidden, args.heads, task.graph.num_classes).to(device)
    print(f"{task.name}: {task.graph.num_nodes} nodes, {task.graph.edge_index.size(1)} directed "
          f"edges, {task.graph.num_classes} classes, {args.heads} heads, device {device}")
    return train(model, task, csr, args, MIN_KARATE_ACC)


if __name__ == "__main__":
    sys.exit(main())
