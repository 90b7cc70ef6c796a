"""Trains unchanged PyG models with torchplug's PyG backend off, then on.

The models are plain torch_geometric code: a GCN, a GraphSAGE and a GAT
classify the nodes of a synthetic planted-partition graph
(``torchplug.datasets.random_graph``), and a GIN with global mean pooling
classifies a batch of small synthetic graphs (sparse ones against dense
ones, 10 to 30 nodes each). Each model is trained twice from the same
initial weights, with ``torchplug.pyg`` off and then on; the script prints
both median step times and final accuracies. It exits with status 1 when
an accuracy with the backend on falls short of :data:`MIN_ACC`.

    python examples/pyg_backend.py [--device cpu|cuda] [--epochs 30] [--nodes 2000] [--graphs 512]
    python examples/pyg_backend.py --device cuda --nodes 200000 --models gcn,sage
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric import nn as gnn

import torchplug
import torchplug.pyg
from torchplug.datasets import random_graph

#: The run fails when a model's final accuracy with the backend on is below this.
MIN_ACC: float = 0.7


class GCN(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = gnn.GCNConv(features, hidden), gnn.GCNConv(hidden, classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv2(F.dropout(self.conv1(x, edge_index).relu(), 0.5, self.training), edge_index)


class GraphSAGE(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = gnn.SAGEConv(features, hidden), gnn.SAGEConv(hidden, classes, aggr="max")

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv2(F.dropout(self.conv1(x, edge_index).relu(), 0.5, self.training), edge_index)


class GAT(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.conv1 = gnn.GATConv(features, hidden // 8, heads=8)
        self.conv2 = gnn.GATConv(hidden, classes, heads=1)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv2(F.elu(self.conv1(x, edge_index)), edge_index)


class GIN(nn.Module):
    """Three GIN layers, global mean pooling of each graph, a linear classifier."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        dims = [features, hidden, hidden, hidden]
        self.convs = nn.ModuleList(
            gnn.GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))) for a, b in zip(dims, dims[1:]))
        self.classify = nn.Linear(hidden, classes)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.classify(gnn.global_mean_pool(x, batch, size=num_graphs))


@dataclass
class Task:
    """What a model is trained on: its inputs, labels, the items trained on
    and those scored, and how many classes there are."""

    inputs: tuple
    y: Tensor
    train: Tensor
    evaluate: Tensor
    classes: int
    features: int


def node_task(nodes: int, seed: int, device: torch.device) -> Task:
    graph = random_graph(nodes, seed=seed, device=device)
    perm = torch.randperm(nodes, generator=torch.Generator().manual_seed(seed)).to(device)
    return Task((graph.x, graph.edge_index), graph.y, perm[: nodes // 2], perm[nodes // 2:], graph.num_classes,
                graph.x.size(1))


def graph_task(graphs: int, seed: int, device: torch.device) -> Task:
    """``graphs`` small graphs in one batch: label 0 has about 1.5 random
    edges per node, label 1 about 4; every node's feature is a constant."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(10, 31, (graphs,), generator=generator)
    labels = torch.randint(0, 2, (graphs,), generator=generator)
    edges, start = [], 0
    for size, label in zip(sizes.tolist(), labels.tolist()):
        count = int(size * (4.0 if label else 1.5))
        pairs = torch.randint(0, size, (2, count), generator=generator) + start
        edges.append(torch.cat([pairs, pairs.flip(0)], dim=1))
        start += size
    batch = torch.repeat_interleave(torch.arange(graphs), sizes)
    items = torch.randperm(graphs, generator=generator)
    x = torch.ones(start, 4)
    inputs = (x.to(device), torch.cat(edges, dim=1).to(device), batch.to(device), graphs)
    return Task(inputs, labels.to(device), items[: graphs // 2].to(device), items[graphs // 2:].to(device), 2, 4)


def train(model: nn.Module, task: Task, epochs: int, lr: float) -> tuple[float, float]:
    """Adam over ``epochs`` steps; returns the median step time (ms) and the final accuracy."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4)
    step_ms = []
    for _ in range(epochs):
        model.train()
        if task.y.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(*task.inputs)[task.train], task.y[task.train])
        loss.backward()
        optimizer.step()
        if task.y.is_cuda:
            torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - start) * 1e3)
    model.eval()
    with torch.no_grad():
        predicted = model(*task.inputs)[task.evaluate].argmax(-1)
    return statistics.median(step_ms), (predicted == task.y[task.evaluate]).float().mean().item()


MODELS: dict[str, tuple[Callable[..., nn.Module], float]] = {
    "gcn": (GCN, 0.01), "sage": (GraphSAGE, 0.01), "gat": (GAT, 0.005), "gin": (GIN, 0.01)}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Command-line options; see the module docstring."""
    has_cuda = torch.cuda.is_available() and torchplug.with_cuda
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if has_cuda else "cpu")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--nodes", type=int, default=2000, help="nodes of the node-classification graph")
    parser.add_argument("--graphs", type=int, default=512, help="small graphs in the GIN's batch")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--models", default=",".join(MODELS), help="a comma-separated subset of " + ",".join(MODELS))
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Trains each model off and on, prints a line for each; returns the exit status."""
    args = parse_args(argv)
    device = torch.device(args.device)
    names = args.models.split(",")
    unknown = set(names) - set(MODELS)
    if unknown:
        raise SystemExit(f"pyg_backend.py: unknown models {sorted(unknown)}; choose from {', '.join(MODELS)}")
    nodes = node_task(args.nodes, args.seed, device) if set(names) - {"gin"} else None
    graphs = graph_task(args.graphs, args.seed, device) if "gin" in names else None
    print(f"device {device}; {args.nodes} nodes for gcn, sage, gat; {args.graphs} small graphs for gin; "
          f"{args.epochs} epochs")
    status = 0
    for name in names:
        make, lr = MODELS[name]
        task = graphs if name == "gin" else nodes
        results = {}
        for on in (False, True):
            torch.manual_seed(args.seed)
            model = make(task.features, args.hidden, task.classes).to(device)
            with torchplug.pyg.enabled(on):
                results[on] = train(model, task, args.epochs, lr)
        (off_ms, off_acc), (on_ms, on_acc) = results[False], results[True]
        print(f"{name:5s} backend off: step {off_ms:8.2f} ms  acc {off_acc:.3f} | backend on: step {on_ms:8.2f} ms"
              f"  acc {on_acc:.3f} | {off_ms / on_ms:.2f}x")
        if on_acc < MIN_ACC:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
