"""Training-step times of the examples' models against PyG's layers on one
graph (needs torch_geometric and a CUDA device):

    PYTHONPATH=build/install python3 scripts/gnn_steps.py [--nodes 500000 --edges 5000000]

A random graph of N nodes and E edges, 128 input features, 64 hidden, 8
classes; each model takes 3 warm-up and 10 timed steps (forward, backward,
Adam), median reported: examples/gcn.py's GCN (spmm_sum) against two
GCNConv, examples/sage.py's GraphSAGE (spmm_mean, spmm_max) against two
SAGEConv with the same aggregation.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gcn  # noqa: E402
import sage  # noqa: E402
from torch_geometric.nn import GCNConv, SAGEConv  # noqa: E402

FEATURES, HIDDEN, CLASSES = 128, 64, 8


class PygGCN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(FEATURES, HIDDEN), GCNConv(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


class PygSAGE(torch.nn.Module):
    def __init__(self, aggr: str) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(FEATURES, HIDDEN, aggr=aggr), SAGEConv(HIDDEN, CLASSES, aggr=aggr)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def step_ms(model, x, graph, y, steps: int = 10) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(x, graph), y).backward()
        optimizer.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[steps // 2] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500_000)
    parser.add_argument("--edges", type=int, default=5_000_000)
    args = parser.parse_args()
    torch.manual_seed(0)
    n = args.nodes
    edge_index = torch.randint(0, n, (2, args.edges), device="cuda")
    x = torch.randn(n, FEATURES, device="cuda")
    y = torch.randint(0, CLASSES, (n,), device="cuda")
    ours = step_ms(gcn.GCN(FEATURES, HIDDEN, CLASSES, dropout=0.0).cuda(), x, gcn.normalized_adjacency(edge_index, n), y)
    theirs = step_ms(PygGCN().cuda(), x, edge_index, y)
    print(f"GCN step: torchplug {ours:.2f} ms, PyG GCNConv {theirs:.2f} ms, {theirs / ours:.2f}x")
    neighbours = sage.neighbours(edge_index, n)
    for aggr in ("mean", "max"):
        ours = step_ms(sage.GraphSAGE(FEATURES, HIDDEN, CLASSES, aggr, dropout=0.0).cuda(), x, neighbours, y)
        theirs = step_ms(PygSAGE(aggr).cuda(), x, edge_index, y)
        print(f"SAGE {aggr} step: torchplug {ours:.2f} ms, PyG SAGEConv {theirs:.2f} ms, {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
