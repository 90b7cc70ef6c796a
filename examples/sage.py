"""Trains a two-layer GraphSAGE (Hamilton et al., NeurIPS 2017) built from torchplug ops.

Each layer computes ``W_l aggr_{j -> i} x_j + W_r x_i`` where the
aggregation over each node's in-neighbours is one fused
``torchplug.spmm_mean`` or ``torchplug.spmm_max`` over the CSR adjacency
(rows: destination nodes): no E x F messages are materialised.

The tasks are examples/gcn.py's: the karate club (default; six labelled
nodes, scored on all 34, exit status 1 under :data:`MIN_KARATE_ACC`) or
``--synthetic N``.

    python examples/sage.py [--aggr mean|max] [--device cpu|cuda] [--epochs 200] [--seed 0]
    python examples/sage.py --synthetic 100000 --aggr max
"""

from __future__ import annotations

import argparse
import sys
from typing import List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import torchplug
from gcn import common_parser, csr_by_destination, make_task, train

#: The karate run fails when its final accuracy on all nodes is below this.
MIN_KARATE_ACC: float = 0.8


class Neighbours(NamedTuple):
    """Each node's in-neighbours as CSR rows: ``rowptr [N + 1]``, ``col [E]``,
    and the transpose mean's backward runs over, built once."""

    rowptr: Tensor
    col: Tensor
    transpose: tuple[Tensor, Tensor, Tensor]


def neighbours(edge_index: Tensor, num_nodes: int) -> Neighbours:
    rowptr, col, _ = csr_by_destination(edge_index[0], edge_index[1], num_nodes)
    return Neighbours(rowptr, col, torchplug.spmm_transpose(rowptr, col, num_nodes))


class SAGEConv(nn.Module):
    """``[N, in_features] -> [N, out_features]``: ``lin_l(aggr of neighbours) + lin_r(x)``."""

    def __init__(self, in_features: int, out_features: int, aggr: str) -> None:
        super().__init__()
        if aggr not in ("mean", "max"):
            raise ValueError(f"SAGEConv: aggr must be 'mean' or 'max', got '{aggr}'")
        self.aggr = aggr
        self.lin_l = nn.Linear(in_features, out_features)
        self.lin_r = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: Tensor, graph: Neighbours) -> Tensor:
        if self.aggr == "mean":
            aggregated = torchplug.spmm_mean(graph.rowptr, graph.col, None, x, transpose=graph.transpose)
        else:
            aggregated = torchplug.spmm_max(graph.rowptr, graph.col, None, x)[0]
        return self.lin_l(aggregated) + self.lin_r(x)


class GraphSAGE(nn.Module):
    """Two SAGE layers with ReLU and dropout: ``[N, F] -> [N, C]`` logits."""

    def __init__(self, in_features: int, hidden: int, num_classes: int, aggr: str, dropout: float = 0.5) -> None:
        super().__init__()
        self.conv1 = SAGEConv(in_features, hidden, aggr)
        self.conv2 = SAGEConv(hidden, num_classes, aggr)
        self.dropout = dropout

    def forward(self, x: Tensor, graph: Neighbours) -> Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = F.relu(self.conv1(x, graph))
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(x, graph)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Command-line options; see the module docstring."""
    parser = common_parser(__doc__.split("\n\n")[0], hidden=16, lr=0.01)
    parser.add_argument("--aggr", choices=["mean", "max"], default="mean")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Trains, prints one line per epoch (with its step time) and a final line; returns the exit status."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    task = make_task(args.synthetic, args.seed, device)
    graph = neighbours(task.graph.edge_index, task.graph.num_nodes)
    model = GraphSAGE(task.x.size(1), args.hidden, task.graph.num_classes, args.aggr).to(device)
    print(f"{task.name}: {task.graph.num_nodes} nodes, {task.graph.edge_index.size(1)} directed "
          f"edges, {task.graph.num_classes} classes, {args.aggr} aggregation, device {device}")
    return train(model, task, graph, args, MIN_KARATE_ACC)


if __name__ == "__main__":
    sys.exit(main())
