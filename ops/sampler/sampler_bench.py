"""The sampler's benchmark workloads: neighbour sampling (fanout 15, 10, 5,
with replacement) and uniform random walks over a Chung-Lu power-law graph,
against the same sampling written with vectorised PyTorch calls, and
against torch_sparse's CPU ``neighbor_sample`` (PyG's fallback) where
torch_sparse is installed. The samples are random, so the outputs compared
are counts, which agree within a few percent: the edges and nodes sampled;
for walks, the start column and the share of steps that stayed put. The
graph lives on the CPU."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import torchplug
from torchplug.bench.candidates import TORCHPLUG, Candidate, Lineup
from torchplug.bench.workloads import Scale, count_label
from torchplug.datasets import power_law_graph

TORCH = "torch (vectorised)"

#: Later hops' counts of two samplers agree within this fraction.
RELATIVE_SPREAD = 0.05


@functools.lru_cache(maxsize=1)
def incoming_csr(n: int, avg_degree: int) -> tuple[Tensor, Tensor]:
    """``(colptr, row)``: each node's incoming edges of :func:`power_law_graph`
    (the CSC PyG samples from), int64 on the CPU; the last graph is kept for
    the next workload over it."""
    src, dst = power_law_graph(n, avg_degree, num_features=1).edge_index
    order = torch.argsort(dst, stable=True)
    return torch.cat([dst.new_zeros(1), torch.bincount(dst, minlength=n).cumsum(0)]), src[order]


def sample_in_torch(colptr: Tensor, row: Tensor, seed: Tensor, fanouts: tuple[int, ...]) -> Tensor:
    """Neighbour sampling with replacement in vectorised PyTorch: each hop
    draws ``fanout`` edges of every frontier node with neighbours, and the
    neighbours not seen before (``torch.unique``) are the next frontier.
    Returns the edges and the nodes sampled (float64)."""
    nodes, frontier = seed, seed
    edges = 0
    for fanout in fanouts:
        start, degree = colptr[frontier], colptr[frontier + 1] - colptr[frontier]
        start, degree = start[degree > 0], degree[degree > 0]
        offset = (torch.rand(start.numel(), fanout, dtype=torch.float64) * degree.unsqueeze(1)).long()
        neighbours = row[start.unsqueeze(1) + offset].flatten()
        frontier = torch.unique(neighbours[~torch.isin(neighbours, nodes)])
        nodes = torch.cat([nodes, frontier])
        edges += neighbours.numel()
    return torch.tensor([edges, nodes.numel()], dtype=torch.float64)


def counts_agree(out: Tensor, reference: Tensor) -> bool:
    """The same counts within :data:`RELATIVE_SPREAD`."""
    return out.shape == reference.shape and bool(
        ((out - reference).abs() <= RELATIVE_SPREAD * reference.abs().clamp(min=1)).all())


def torch_sparse_sampler():
    """torch_sparse's CPU ``neighbor_sample`` op, or None where torch_sparse is not installed."""
    if importlib.util.find_spec("torch_sparse") is None:
        return None
    import torch_sparse  # noqa: F401  (registers the ops)
    return torch.ops.torch_sparse.neighbor_sample


def on_devices(ours: Callable[..., Callable[[], Tensor]], graph: tuple[Tensor, ...], device: torch.device,
               note: str) -> list[Candidate]:
    """torchplug over ``graph`` (CPU tensors) on ``device``, and on a GPU
    machine also on its CPU (every core), as PyG's loaders sample there."""
    if device.type != "cuda":
        return [Candidate(TORCHPLUG, ours(*graph), f"CPU, {note}")]
    on_gpu = tuple(t.to(device) for t in graph)
    return [Candidate(TORCHPLUG, ours(*on_gpu), f"CUDA, graph in device memory, {note}"),
            Candidate("torchplug CPU", ours(*graph), f"{torch.get_num_threads()} threads")]


@dataclass(frozen=True)
class NeighborSampleWorkload:
    """``neighbor_sample`` of ``batch`` seeds with fanouts 15, 10, 5 (with
    replacement) over a power-law graph of ``n`` nodes and about ``e`` edges."""

    op: ClassVar[str] = "sampler"
    e: int
    n: int
    batch: int

    @property
    def name(self) -> str:
        return f"neighbor_sample [15, 10, 5] batch={self.batch} E={count_label(self.e)} N={count_label(self.n)}"

    @property
    def terms_per_output(self) -> float:
        return 1.0

    def min_bytes(self) -> int:
        """The first hop's edges (the only ones certain to exist) written as
        (row, col, id) in int64: a floor; sampling is random access, far
        from copy bandwidth."""
        return 8 * 3 * self.batch * 15

    def params(self) -> dict[str, object]:
        return {"E": self.e, "N": self.n, "batch": self.batch, "fanouts": [15, 10, 5]}

    def agrees(self, out: Tensor, reference: Tensor) -> bool:
        return counts_agree(out, reference)

    def lineup(self, device: torch.device) -> Lineup:
        colptr, row = incoming_csr(self.n, max(1, self.e // self.n))
        seed = torch.randperm(self.n, generator=torch.Generator().manual_seed(0))[: self.batch]
        fanouts = [15, 10, 5]

        def ours(colptr: Tensor, row: Tensor, seed: Tensor) -> Callable[[], Tensor]:
            def run() -> Tensor:
                _, _, node_id, edge_id, _, _ = torchplug.neighbor_sample(colptr, row, seed, fanouts, csc=True,
                                                                         replace=True)
                return torch.tensor([edge_id.numel(), node_id.numel()], dtype=torch.float64)
            return run

        candidates = on_devices(ours, (colptr, row, seed), device, "with replacement, pyg-lib's relabelling order")
        candidates.append(Candidate(TORCH, lambda: sample_in_torch(colptr, row, seed, tuple(fanouts)),
                                    "randint offsets, torch.unique per hop"))
        theirs = torch_sparse_sampler()
        if theirs is not None:
            def torch_sparse() -> Tensor:
                node, _, _, edge = theirs(colptr, row, seed, fanouts, True, True)
                return torch.tensor([edge.numel(), node.numel()], dtype=torch.float64)

            candidates.append(Candidate("torch_sparse", torch_sparse, "CPU neighbor_sample, PyG's fallback"))
        return Lineup(tuple(candidates), reference=TORCH)


@dataclass(frozen=True)
class RandomWalkWorkload:
    """Uniform ``random_walk`` of ``walk_length`` steps from ``starts`` nodes."""

    op: ClassVar[str] = "sampler"
    e: int
    n: int
    starts: int
    walk_length: int = 20

    @property
    def name(self) -> str:
        return f"random_walk L={self.walk_length} starts={count_label(self.starts)} E={count_label(self.e)}"

    @property
    def terms_per_output(self) -> float:
        return 1.0

    def min_bytes(self) -> int:
        """The walks written (int64): a floor, each step being a dependent random read."""
        return 8 * self.starts * (self.walk_length + 1)

    def params(self) -> dict[str, object]:
        return {"E": self.e, "N": self.n, "starts": self.starts, "walk_length": self.walk_length}

    def agrees(self, out: Tensor, reference: Tensor) -> bool:
        return counts_agree(out, reference)

    def lineup(self, device: torch.device) -> Lineup:
        rowptr, col = incoming_csr(self.n, max(1, self.e // self.n))
        start = torch.randint(0, self.n, (self.starts,), generator=torch.Generator().manual_seed(0))

        def summary(walks: Tensor) -> Tensor:
            """The start column's sum, then the share of steps that stayed put."""
            stayed = (walks[:, 1:] == walks[:, :-1]).double().mean()
            return torch.stack([walks[:, 0].double().sum(), stayed])

        def in_torch() -> Tensor:
            walks, v = [start], start
            for _ in range(self.walk_length):
                degree = rowptr[v + 1] - rowptr[v]
                step = (torch.rand(v.numel(), dtype=torch.float64) * degree).long()
                v = torch.where(degree > 0, col[(rowptr[v] + step).clamp(max=col.numel() - 1)], v)
                walks.append(v)
            return summary(torch.stack(walks, 1))

        def ours(rowptr: Tensor, col: Tensor, start: Tensor) -> Callable[[], Tensor]:
            return lambda: summary(torchplug.random_walk(rowptr, col, start, self.walk_length).cpu())

        candidates = on_devices(ours, (rowptr, col, start), device, "uniform")
        return Lineup((*candidates, Candidate(TORCH, in_torch, "one gather per step")), reference=TORCH)


def workloads(scale: Scale) -> tuple:
    """On a GPU machine (its CPU samples): an ogbn-products-sized graph (2.4M
    nodes, 124M edges), batches of 1,024 seeds; on a CPU: the scale's nodes
    with 20 edges each."""
    if scale.gpu:
        n, e = 2_400_000, 124_000_000
        return (NeighborSampleWorkload(e, n, 1024), RandomWalkWorkload(e, n, 100_000))
    n = max(1000, scale.n)
    return (NeighborSampleWorkload(20 * n, n, min(1024, n // 4)), RandomWalkWorkload(20 * n, n, min(10_000, n)))
