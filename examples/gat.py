"""Trains a two-layer GAT (Velickovic et al., ICLR 2018) built from torchplug ops.

Each layer scores every edge ``j -> i`` per head as
``LeakyReLU(a_src . W x_j + a_dst . W x_i)`` and normalises the scores over
each node's incoming edges in one op, ``torchplug.edge_attention``; the
multi-head ``torchplug.spmm_sum`` sums the weighted messages into their
nodes. Neither builds the E x H x C messages PyG's GATConv does. The graph
is a CSR of incoming edges (self loops added), built once with its
transpose, which both ops' gradients run over.

The tasks are examples/gcn.py's: the karate club (default; six labelled
nodes, scored on all 34, exit status 1 under :data:`MIN_KARATE_ACC`) or
``--synthetic N``.

    python examples/gat.py [--device cpu|cuda] [--epochs 200] [--heads 8] [--seed 0]
    python examples/gat.py --synthetic 100000
"""

from __future__ import annotations

import argparse
import sys
from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import torchplug
from gcn import common_parser, make_task, positive_int, train

#: The karate run fails when its final accuracy on all nodes is below this.
MIN_KARATE_ACC: float = 0.8


class Csr(NamedTuple):
    """Each node's incoming edges ``src -> dst`` with a self loop per node:
    ``rowptr [N + 1]`` over the destinations, ``col [E + N]`` the sources,
    and the transpose (``torchplug.spmm_transpose``) for the gradients."""

    rowptr: Tensor
    col: Tensor
    transpose: Tuple[Tensor, Tensor, Tensor]
    num_nodes: int


def with_self_loops(edge_index: Tensor, num_nodes: int) -> Csr:
    loops = torch.arange(num_nodes, device=edge_index.device)
    src, dst = torch.cat([edge_index[0], loops]), torch.cat([edge_index[1], loops])
    order = torch.argsort(dst, stable=True)
    rowptr = torch.cat([dst.new_zeros(1), torch.bincount(dst, minlength=num_nodes).cumsum(0)])
    col = src[order]
    return Csr(rowptr, col, torchplug.spmm_transpose(rowptr, col, num_nodes), num_nodes)


class GATConv(nn.Module):
    """One attention layer: ``[N, in_features] -> [N, heads * out_features]``
    (``concat``) or ``[N, out_features]`` (the heads averaged)."""

    def __init__(self, in_features: int, out_features: int, heads: int, concat: bool = True,
                 dropout: float = 0.6) -> None:
        super().__init__()
        self.heads, self.out_features, self.concat, self.dropout = heads, out_features, concat, dropout
        self.lin = nn.Linear(in_features, heads * out_features, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_features))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_features))
        self.bias = nn.Parameter(torch.zeros(heads * out_features if concat else out_features))
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x: Tensor, csr: Csr) -> Tensor:
        h = self.lin(x).view(-1, self.heads, self.out_features)               # [N, H, C]
        score_src = (h * self.att_src).sum(-1)                                # [N, H]
        score_dst = (h * self.att_dst).sum(-1)
        alpha = torchplug.edge_attention(csr.rowptr, csr.col, score_src, score_dst, "gat", negative_slope=0.2,
                                         dropout=self.dropout if self.training else 0.0,
                                         transpose=csr.transpose)             # [E, H]
        out = torchplug.spmm_sum(csr.rowptr, csr.col, alpha, h, transpose=csr.transpose)  # [N, H, C]
        out = out.flatten(1) if self.concat else out.mean(1)
        return out + self.bias


class GAT(nn.Module):
    """Two GAT layers with ELU and dropout: ``[N, F] -> [N, C]`` logits."""

    def __init__(self, in_features: int, hidden: int, heads: int, num_classes: int, dropout: float = 0.6) -> None:
        super().__init__()
        self.conv1 = GATConv(in_features, hidden, heads, dropout=dropout)
        self.conv2 = GATConv(hidden * heads, num_classes, 1, concat=False, dropout=dropout)
        self.dropout = dropout

    def forward(self, x: Tensor, csr: Csr) -> Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = F.elu(self.conv1(x, csr))
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(x, csr)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Command-line options; see the module docstring."""
    parser = common_parser(__doc__.split("\n\n")[0], hidden=8, lr=0.005)
    parser.add_argument("--heads", type=positive_int, default=8)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Trains, prints one line per epoch (with its step time) and a final line; returns the exit status."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    task = make_task(args.synthetic, args.seed, device)
    csr = with_self_loops(task.graph.edge_index, task.graph.num_nodes)
    model = GAT(task.x.size(1), args.hidden, args.heads, task.graph.num_classes).to(device)
    print(f"{task.name}: {task.graph.num_nodes} nodes, {task.graph.edge_index.size(1)} directed "
          f"edges, {task.graph.num_classes} classes, {args.heads} heads, device {device}")
    return train(model, task, csr, args, MIN_KARATE_ACC)


if __name__ == "__main__":
    sys.exit(main())
