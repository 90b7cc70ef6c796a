"""One epoch of mini-batch GraphSAGE (``python -m torchplug.bench --only
epoch``): sampling, feature gathering and a training step per batch, with
torchplug's sampler on the device (the graph in device memory, or in pinned
host memory), against PyG's ``NeighborLoader`` on its defaults (CPU sampling
in worker processes, through pyg-lib or torch_sparse) with the backend off,
and the same loader with the backend on. Every candidate trains the same
PyG ``SAGEConv`` model on the device; an epoch's output is its batch count."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug
from torchplug.bench.candidates import TORCHPLUG, Candidate, Lineup
from torchplug.bench.workloads import Scale, count_label

from torchplug.ops.sampler.sampler_bench import incoming_csr

#: PyG's loader workers: its guide's advice, a share of the host's cores.
LOADER_WORKERS = min(8, max(1, (os.cpu_count() or 2) // 2))


def pyg_can_sample() -> bool:
    """Whether PyG's own NeighborLoader has a sampler here (pyg-lib or torch_sparse)."""
    if importlib.util.find_spec("torch_geometric") is None:
        return False
    import torch_geometric.typing as pyg_typing
    return pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE


@dataclass(frozen=True)
class EpochWorkload:
    """An epoch over ``seeds`` training nodes of a power-law graph of ``n``
    nodes, about ``e`` edges and ``f`` features: batches of ``batch``,
    fanouts 15, 10, 5, three SAGEConv layers of ``hidden``, ``classes``
    classes (ogbn-products' 47)."""

    op: ClassVar[str] = "epoch"
    e: int
    n: int
    f: int
    seeds: int
    batch: int = 1024
    hidden: int = 256
    classes: int = 47

    @property
    def name(self) -> str:
        return (f"SAGE epoch {count_label(self.seeds)} seeds batch={self.batch} [15, 10, 5] "
                f"E={count_label(self.e)} N={count_label(self.n)} F={self.f}")

    @property
    def terms_per_output(self) -> float:
        return 1.0

    def min_bytes(self) -> int:
        """The seeds' own features read once: a floor far below what sampling touches."""
        return 4 * self.seeds * self.f

    def params(self) -> dict[str, object]:
        return {"E": self.e, "N": self.n, "F": self.f, "seeds": self.seeds, "batch": self.batch,
                "fanouts": [15, 10, 5], "hidden": self.hidden, "workers": LOADER_WORKERS}

    def lineup(self, device: torch.device) -> Lineup:
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader
        from torch_geometric.nn import SAGEConv

        from torchplug import pyg as backend

        colptr, row = incoming_csr(self.n, max(1, self.e // self.n))
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(self.n, self.f, generator=generator)
        y = torch.randint(0, self.classes, (self.n,), generator=generator)
        train = torch.randperm(self.n, generator=generator)[: self.seeds]
        fanouts = [15, 10, 5]
        torch.manual_seed(0)
        sizes = [self.f] + [self.hidden] * (len(fanouts) - 1) + [self.classes]
        convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(sizes, sizes[1:])).to(device)
        optimizer = torch.optim.SGD(convs.parameters(), lr=0.01)

        def step(features: Tensor, edge_index: Tensor, labels: Tensor) -> None:
            h = features
            for depth, conv in enumerate(convs):
                h = conv(h, edge_index)
                if depth < len(convs) - 1:
                    h = h.relu()
            loss = torch.nn.functional.cross_entropy(h[: labels.numel()], labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        def ours(place: Callable[[Tensor], Tensor]) -> Callable[[], Tensor]:
            graph, features, labels = (place(colptr), place(row)), place(x), place(y)
            seeds = train.to(device)
            sampling = torch.Generator(device).manual_seed(0)

            def epoch() -> Tensor:
                batches = 0
                for batch in seeds[torch.randperm(seeds.numel(), device=device)].split(self.batch):
                    out_row, out_col, node_id, _, _, _ = torchplug.neighbor_sample(
                        *graph, batch, fanouts, csc=True, return_edge_id=False, generator=sampling)
                    step(torchplug.gather_rows(features, node_id), torch.stack([out_row, out_col]),
                         torchplug.gather_rows(labels, batch))
                    batches += 1
                return torch.tensor([float(batches)])
            return epoch

        candidates = [Candidate(TORCHPLUG, ours(lambda t: t.to(device)), f"sampling on {device.type}, graph there",
                                context=backend.enabled)]
        if device.type == "cuda":
            candidates.append(Candidate("torchplug host graph", ours(torch.Tensor.pin_memory),
                                        "graph and features in pinned host memory", context=backend.enabled))
        data = Data(x=x, y=y, edge_index=torch.stack([row, torch.repeat_interleave(torch.arange(self.n),
                                                                                  colptr.diff())]))

        def loader_epoch(loader: Iterator) -> Callable[[], Tensor]:
            def epoch() -> Tensor:
                batches = 0
                for batch in loader:
                    batch = batch.to(device, non_blocking=True)
                    step(batch.x, batch.edge_index, batch.y[: batch.batch_size])
                    batches += 1
                return torch.tensor([float(batches)])
            return epoch

        def loader() -> Iterator:
            return NeighborLoader(data, num_neighbors=fanouts, batch_size=self.batch, input_nodes=train,
                                  shuffle=True, num_workers=LOADER_WORKERS, persistent_workers=True,
                                  pin_memory=device.type == "cuda")

        if pyg_can_sample():  # PyG's own samplers: pyg-lib or torch_sparse
            with backend.enabled(False):
                native = loader()
            candidates.append(Candidate("PyG NeighborLoader", loader_epoch(native),
                                        f"backend off, {LOADER_WORKERS} workers", context=lambda: backend.enabled(False)))
        with backend.enabled():
            routed = loader()
        candidates.append(Candidate("PyG NeighborLoader backend on", loader_epoch(routed),
                                    f"{LOADER_WORKERS} workers, torchplug's CPU sampler", context=backend.enabled))
        return Lineup(tuple(candidates), reference=TORCHPLUG)


def workloads(scale: Scale) -> tuple:
    """On a GPU machine: an ogbn-products-sized graph (2.4M nodes, 124M
    edges, 100 features), 20 batches; on a CPU: the scale's nodes with 20
    edges each, 4 batches of 256. Needs torch_geometric."""
    if importlib.util.find_spec("torch_geometric") is None:
        return ()
    if scale.gpu:
        return (EpochWorkload(124_000_000, 2_400_000, 100, 20 * 1024),)
    n = max(1000, scale.n)
    return (EpochWorkload(20 * n, n, 32, 4 * 256, batch=256, hidden=64),)
