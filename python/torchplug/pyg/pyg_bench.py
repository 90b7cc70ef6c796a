"""The PyG backend's benchmark workloads (``python -m torchplug.bench --only
pyg``): a training step of an unchanged two-layer PyG model, the backend on
against off, in one run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug.pyg
from torchplug.bench.candidates import TORCHPLUG, Candidate, Lineup
from torchplug.bench.workloads import Scale, count_label

#: The reference: PyG with the backend off.
PYG = "PyG"


def _layers() -> dict[str, Callable[[int, int], torch.nn.Module]]:
    """Each benchmarked layer by name: a factory of ``(in, out)``."""
    from torch_geometric import nn as gnn

    return {
        "GCNConv": lambda i, o: gnn.GCNConv(i, o),
        "SAGEConv mean": lambda i, o: gnn.SAGEConv(i, o, aggr="mean"),
        "SAGEConv max": lambda i, o: gnn.SAGEConv(i, o, aggr="max"),
        "SAGEConv mean-max-std": lambda i, o: gnn.SAGEConv(i, o, aggr=["mean", "max", "std"]),
        "GINConv": lambda i, o: gnn.GINConv(torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(),
                                                                 torch.nn.Linear(o, o))),
        "GraphConv": lambda i, o: gnn.GraphConv(i, o),
        "GATConv": lambda i, o: gnn.GATConv(i, o // 8, heads=8),
        "GATv2Conv": lambda i, o: gnn.GATv2Conv(i, o // 8, heads=8),
        "TransformerConv": lambda i, o: gnn.TransformerConv(i, o // 8, heads=8),
    }


class TwoLayers(torch.nn.Module):
    """``layer(F, hidden) -> ReLU -> layer(hidden, classes)``."""

    def __init__(self, factory: Callable[[int, int], torch.nn.Module], f: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = factory(f, hidden), factory(hidden, classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


@dataclass(frozen=True)
class PygStepWorkload:
    """One training step (forward, cross-entropy, every parameter's gradient)
    of :class:`TwoLayers` over ``N`` nodes and ``E`` random edges (uniform
    sources and targets), ``F`` input features, 64 hidden, 8 classes."""

    op: ClassVar[str] = "pyg"
    layer: str
    e: int
    f: int
    n: int

    @property
    def name(self) -> str:
        return f"pyg {self.layer} train step E={count_label(self.e)} F={self.f} N={count_label(self.n)}"

    @property
    def terms_per_output(self) -> float:
        return max(1.0, self.e / self.n) * self.f

    def min_bytes(self) -> int:
        """Each layer's messages read once forward and once backward (float32)."""
        return 4 * 2 * self.e * (self.f + 64)

    def params(self) -> dict[str, object]:
        return {"layer": self.layer, "E": self.e, "F": self.f, "N": self.n}

    def lineup(self, device: torch.device) -> Lineup:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(self.n, self.f, generator=generator).to(device)
        edge_index = torch.randint(0, self.n, (2, self.e), generator=generator).to(device)
        y = torch.randint(0, 8, (self.n,), generator=generator).to(device)
        torch.manual_seed(0)
        model = TwoLayers(_layers()[self.layer], self.f, 64, 8).to(device)
        params = list(model.parameters())

        def step() -> Tensor:
            out = model(x, edge_index)
            torch.autograd.grad(torch.nn.functional.cross_entropy(out, y), params)
            return out.detach()

        return Lineup((Candidate(TORCHPLUG, step, "backend on", context=torchplug.pyg.enabled),
                       Candidate(PYG, step, "backend off", context=lambda: torchplug.pyg.enabled(False))),
                      reference=PYG)


def workloads(scale: Scale) -> tuple[PygStepWorkload, ...]:
    """On a GPU: every layer at N=200K, E=2M, F=128; on a CPU: every layer
    but GraphConv at a quarter of the scale's nodes, ten edges each, F=64."""
    if scale.gpu:
        return tuple(PygStepWorkload(layer, 2_000_000, 128, 200_000) for layer in _layers())
    n = max(64, scale.n // 4)
    return tuple(PygStepWorkload(layer, 10 * n, 64, n) for layer in (
        "GCNConv", "SAGEConv mean", "SAGEConv max", "SAGEConv mean-max-std", "GINConv", "GATConv", "GATv2Conv",
        "TransformerConv"))
