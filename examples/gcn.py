"""Trains a two-layer GCN (Kipf & Welling, ICLR 2017) built from torchplug ops.

Each layer computes ``D^-1/2 (A + I) D^-1/2 X W + b``: the normalised
adjacency is a CSR matrix (rows: destination nodes) and one fused
``torchplug.spmm_sum`` gathers, weighs and sums the messages without
materialising them; the bias is added with ``torchplug.add``.

Karate club (default): one-hot node ids as features; semi-supervised, trained
on the labels of six nodes only (:data:`KARATE_TRAIN_NODES`) and scored on all
34. Exits with status 1 when the final accuracy is under
:data:`MIN_KARATE_ACC`, so the script doubles as a smoke test.

``--synthetic N``: a planted-partition graph of ``N`` nodes with noisy
class-correlated features (``torchplug.datasets.random_graph``), trained on a
random half of the nodes and scored on the other half.

    python examples/gcn.py [--device cpu|cuda] [--epochs 200] [--seed 0]
    python examples/gcn.py --synthetic 100000

Given ``--seed``, a CPU run prints the same numbers every time (bar the timing).
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
from torchplug.datasets import Graph, karate_club, random_graph

#: Labelled karate nodes: Mr. Hi (0) and two of his close members (1, 2);
#: the Officer (33) and two of his (31, 32). Every other label stays hidden.
KARATE_TRAIN_NODES: List[int] = [0, 1, 2, 31, 32, 33]

#: The karate run fails when its final accuracy on all nodes is below this.
MIN_KARATE_ACC: float = 0.8


class Adjacency(NamedTuple):
    """``D^-1/2 (A + I) D^-1/2`` as a CSR matrix whose rows are destination nodes.

    Attributes:
        rowptr: ``[N + 1]`` int64 row offsets.
        col: ``[E + N]`` int64 source node of each edge (self loops included).
        weight: ``[E + N]`` float32 ``deg(src)^-1/2 * deg(dst)^-1/2``.
        num_nodes: ``N``.
        transpose: ``torchplug.spmm_transpose`` of the matrix, built once for
            every backward (which otherwise builds it each step).
    """

    rowptr: Tensor
    col: Tensor
    weight: Tensor
    num_nodes: int
    transpose: tuple[Tensor, Tensor, Tensor]


def csr_by_destination(src: Tensor, dst: Tensor, num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    """(rowptr, col, perm): the edges ``src -> dst`` as CSR rows by ``dst``
    (stable order), and the permutation that sorts them."""
    perm = torch.sort(dst, stable=True).indices
    counts = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device).index_add_(
        0, dst + 1, torch.ones_like(dst))
    return counts.cumsum(0), src[perm], perm


def normalized_adjacency(edge_index: Tensor, num_nodes: int) -> Adjacency:
    """Adds self loops to ``edge_index`` (``[2, E]`` int64) and weights its edges.

    The degree counts incoming edges including the self loop, so it is at
    least 1 and the weights are finite.
    """
    loops = torch.arange(num_nodes, device=edge_index.device)
    src = torch.cat([edge_index[0], loops])
    dst = torch.cat([edge_index[1], loops])
    ones = torch.ones(dst.numel(), device=dst.device)
    inv_sqrt_deg = torchplug.scatter_sum(ones, dst, dim=0, dim_size=num_nodes).rsqrt()
    rowptr, col, perm = csr_by_destination(src, dst, num_nodes)
    weight = inv_sqrt_deg[col] * inv_sqrt_deg[dst[perm]]
    return Adjacency(rowptr, col, weight, num_nodes, torchplug.spmm_transpose(rowptr, col, num_nodes))


class GCNConv(nn.Module):
    """One graph convolution: ``[N, in_features] -> [N, out_features]``."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: Tensor, adj: Adjacency) -> Tensor:
        """``x``: ``[N, in_features]``; returns ``[N, out_features]``."""
        h = self.lin(x)
        out = torchplug.spmm_sum(adj.rowptr, adj.col, adj.weight, h, transpose=adj.transpose)
        return torchplug.add(out, self.bias)


class GCN(nn.Module):
    """Two GCN layers with ReLU and dropout: ``[N, F] -> [N, C]`` logits."""

    def __init__(
        self, in_features: int, hidden: int, num_classes: int, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_features, hidden)
        self.conv2 = GCNConv(hidden, num_classes)
        self.dropout = dropout

    def forward(self, x: Tensor, adj: Adjacency) -> Tensor:
        """``x``: ``[N, F]`` node features; returns ``[N, C]`` class logits."""
        x = F.dropout(x, self.dropout, self.training)
        x = F.relu(self.conv1(x, adj))
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(x, adj)


class Task(NamedTuple):
    """What to train on.

    Attributes:
        name: the dataset, for the log.
        graph: edges and labels ``y`` (``[N]``).
        x: ``[N, F]`` float32 node features.
        train: ``[K]`` int64 ids of the nodes whose labels the loss sees.
        evaluate: ``[M]`` int64 ids of the nodes the accuracy is measured on.
        eval_name: the evaluated split's name, for the log.
    """

    name: str
    graph: Graph
    x: Tensor
    train: Tensor
    evaluate: Tensor
    eval_name: str


def make_task(synthetic: Optional[int], seed: int, device: torch.device) -> Task:
    """Karate club when ``synthetic`` is ``None``, else ``random_graph(synthetic)``."""
    if synthetic is None:
        graph = karate_club(device)
        return Task(
            name="karate club",
            graph=graph,
            x=torch.eye(graph.num_nodes, device=device),
            train=torch.tensor(KARATE_TRAIN_NODES, device=device),
            evaluate=torch.arange(graph.num_nodes, device=device),
            eval_name="all",
        )
    graph = random_graph(synthetic, seed=seed, device=device)
    assert graph.x is not None
    perm = torch.randperm(synthetic, generator=torch.Generator().manual_seed(seed)).to(device)
    half = synthetic // 2
    return Task("random_graph", graph, graph.x, perm[:half], perm[half:], "val")


def accuracy(logits: Tensor, y: Tensor, nodes: Tensor) -> float:
    """Fraction of ``nodes`` (``[K]`` int64) whose arg-max logit equals ``y``."""
    return (logits[nodes].argmax(-1) == y[nodes]).float().mean().item()


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def common_parser(description: str, hidden: int, lr: float) -> argparse.ArgumentParser:
    """The options every example takes (examples/gat.py adds its own)."""
    has_cuda = torch.cuda.is_available() and torchplug.with_cuda
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--synthetic", type=positive_int, metavar="N",
                        help="train on random_graph(N) instead of the karate club")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if has_cuda else "cpu")
    parser.add_argument("--epochs", type=positive_int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=positive_int, default=hidden)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    return parser


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Command-line options; see the module docstring."""
    return common_parser(__doc__.split("\n\n")[0], hidden=16, lr=0.01).parse_args(argv)


def train(model: nn.Module, task: Task, graph_input: object, args: argparse.Namespace, min_acc: float) -> int:
    """Trains ``model(task.x, graph_input)`` with Adam, prints one line per
    epoch (with the training step's time) and a final line; returns the exit
    status: 1 when a karate run ends under ``min_acc``."""
    y = task.graph.y
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    start = time.perf_counter()
    loss_value, eval_acc = float("nan"), 0.0
    for epoch in range(1, args.epochs + 1):
        step_start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(task.x, graph_input)[task.train], y[task.train])
        loss.backward()
        optimizer.step()
        loss_value = loss.item()  # waits for the step
        step_ms = (time.perf_counter() - step_start) * 1e3

        model.eval()
        with torch.no_grad():
            logits = model(task.x, graph_input)
        train_acc = accuracy(logits, y, task.train)
        eval_acc = accuracy(logits, y, task.evaluate)
        print(f"epoch {epoch:4d}  loss {loss_value:.4f}  train {train_acc:.3f}  "
              f"{task.eval_name} {eval_acc:.3f}  step {step_ms:.2f} ms")
    elapsed = time.perf_counter() - start

    print(f"final: loss={loss_value:.4f} acc={eval_acc:.4f} time={elapsed:.2f}s")
    if args.synthetic is None and eval_acc < min_acc:
        print(f"karate accuracy {eval_acc:.4f} is below the sanity threshold {min_acc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Trains, prints one line per epoch and a final line; returns the exit status."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    task = make_task(args.synthetic, args.seed, device)
    adj = normalized_adjacency(task.graph.edge_index, task.graph.num_nodes)
    model = GCN(task.x.size(1), args.hidden, task.graph.num_classes).to(device)
    print(f"{task.name}: {task.graph.num_nodes} nodes, {task.graph.edge_index.size(1)} directed "
          f"edges, {task.graph.num_classes} classes, {task.train.numel()} train / "
          f"{task.evaluate.numel()} {task.eval_name} nodes, device {device}")
    return train(model, task, adj, args, MIN_KARATE_ACC)


if __name__ == "__main__":
    sys.exit(main())
