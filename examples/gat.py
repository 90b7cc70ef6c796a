"""Trains a two-layer GAT (Velickovic et al., ICLR 2018) built from torchplug ops.

Each layer scores every edge ``j -> i`` per head as
``LeakyReLU(a_src . W x_j + a_dst . W x_i)``, normalises the scores over each
node's incoming edges with ``torchplug.scatter_softmax`` (one fused op where
PyG's ``softmax`` takes four passes), and sums the weighted messages into
their nodes with ``torchplug.scatter_sum``. Self loops are added.

The tasks are examples/gcn.py's: the karate club (default; six labelled
nodes, scored on all 34, exit status 1 under :data:`MIN_KARATE_ACC`) or
``--synthetic N``.

    python examples/gat.py [--device cpu|cuda] [--epochs 200] [--heads 8] [--seed 0]
    python examples/gat.py --synthetic 100000
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import torchplug
from gcn import accuracy, make_task, positive_int

#: The karate run fails when its final accuracy on all nodes is below this.
MIN_KARATE_ACC: float = 0.8


class Edges(NamedTuple):
    """``src -> dst`` edges with a self loop per node (``[E + N]`` int64 each)."""

    src: Tensor
    dst: Tensor
    num_nodes: int


def with_self_loops(edge_index: Tensor, num_nodes: int) -> Edges:
    loops = torch.arange(num_nodes, device=edge_index.device)
    return Edges(torch.cat([edge_index[0], loops]), torch.cat([edge_index[1], loops]), num_nodes)


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

    def forward(self, x: Tensor, edges: Edges) -> Tensor:
        h = self.lin(x).view(-1, self.heads, self.out_features)               # [N, H, C]
        score_src = (h * self.att_src).sum(-1)                                # [N, H]
        score_dst = (h * self.att_dst).sum(-1)
        scores = F.leaky_relu(score_src[edges.src] + score_dst[edges.dst], 0.2)  # [E, H]
        alpha = torchplug.scatter_softmax(scores, edges.dst, 0, edges.num_nodes)
        alpha = F.dropout(alpha, self.dropout, self.training)
        messages = h.index_select(0, edges.src) * alpha.unsqueeze(-1)         # [E, H, C]
        out = torchplug.scatter_sum(messages, edges.dst, dim=0, dim_size=edges.num_nodes)
        out = out.flatten(1) if self.concat else out.mean(1)
        return out + self.bias


class GAT(nn.Module):
    """Two GAT layers with ELU and dropout: ``[N, F] -> [N, C]`` logits."""

    def __init__(self, in_features: int, hidden: int, heads: int, num_classes: int, dropout: float = 0.6) -> None:
        super().__init__()
        self.conv1 = GATConv(in_features, hidden, heads, dropout=dropout)
        self.conv2 = GATConv(hidden * heads, num_classes, 1, concat=False, dropout=dropout)
        self.dropout = dropout

    def forward(self, x: Tensor, edges: Edges) -> Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = F.elu(self.conv1(x, edges))
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(x, edges)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    has_cuda = torch.cuda.is_available() and torchplug.with_cuda
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=positive_int, metavar="N",
                        help="train on random_graph(N) instead of the karate club")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if has_cuda else "cpu")
    parser.add_argument("--epochs", type=positive_int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=positive_int, default=8)
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Trains, prints one line per epoch (with its time) and a final line; returns the exit status."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    task = make_task(args.synthetic, args.seed, device)
    y = task.graph.y
    edges = with_self_loops(task.graph.edge_index, task.graph.num_nodes)
    model = GAT(task.x.size(1), args.hidden, args.heads, task.graph.num_classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    print(f"{task.name}: {task.graph.num_nodes} nodes, {task.graph.edge_index.size(1)} directed "
          f"edges, {task.graph.num_classes} classes, {args.heads} heads, device {device}")

    start = time.perf_counter()
    loss_value, eval_acc = float("nan"), 0.0
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(task.x, edges)[task.train], y[task.train])
        loss.backward()
        optimizer.step()
        loss_value = loss.item()
        step_ms = (time.perf_counter() - epoch_start) * 1e3

        model.eval()
        with torch.no_grad():
            logits = model(task.x, edges)
        train_acc = accuracy(logits, y, task.train)
        eval_acc = accuracy(logits, y, task.evaluate)
        print(f"epoch {epoch:4d}  loss {loss_value:.4f}  train {train_acc:.3f}  "
              f"{task.eval_name} {eval_acc:.3f}  step {step_ms:.2f} ms")
    elapsed = time.perf_counter() - start

    print(f"final: loss={loss_value:.4f} acc={eval_acc:.4f} time={elapsed:.2f}s")
    if args.synthetic is None and eval_acc < MIN_KARATE_ACC:
        print(f"karate accuracy {eval_acc:.4f} is below the sanity threshold {MIN_KARATE_ACC}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
