"""PyG's loaders sampling through torchplug with the backend on: every batch
of NeighborLoader (uniform, with replacement, disjoint, temporal, weighted)
and LinkNeighborLoader is a subgraph of the input graph with PyG's layout,
Node2Vec's walks follow edges, and disable() puts PyG's flags and ops back."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pyg = pytest.importorskip("torch_geometric")

import torch_geometric.typing  # noqa: E402
import torchplug.pyg  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader  # noqa: E402
from torch_geometric.nn import Node2Vec  # noqa: E402

N, E = 120, 900


@pytest.fixture
def data() -> Data:
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, N, (2, E), generator=g)
    weight = torch.rand(E, generator=g) * (torch.rand(E, generator=g) > 0.3)
    return Data(x=torch.randn(N, 4, generator=g), edge_index=edge_index, num_nodes=N,
                time=torch.randint(0, 50, (N,), generator=g), weight=weight)


def assert_subgraph(batch: Data, data: Data) -> None:
    """The batch's edges are the input's edges e_id, between its nodes n_id,
    and the per-hop counts add up."""
    edges = torch.stack([batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]])
    assert torch.equal(edges, data.edge_index[:, batch.e_id])
    assert sum(batch.num_sampled_nodes) == batch.n_id.numel()
    assert sum(batch.num_sampled_edges) == batch.e_id.numel()


@pytest.mark.parametrize("options", [{}, {"replace": True}, {"disjoint": True}, {"time_attr": "time"},
                                     {"weight_attr": "weight"}], ids=str)
def test_neighbor_loader_batches_are_subgraphs(data: Data, options: dict) -> None:
    seeds = torch.arange(0, N, 3)
    with torchplug.pyg.enabled():
        loader = NeighborLoader(data, num_neighbors=[4, 3], batch_size=10, input_nodes=seeds, **options)
        batches = list(loader)
    assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in batches]), seeds)
    for batch in batches:
        assert_subgraph(batch, data)
        # Each seed's incoming edges are sampled for it: 4 at most (exactly 4 with replacement).
        per_seed = torch.bincount(batch.edge_index[1][:batch.num_sampled_edges[0]], minlength=batch.batch_size)
        assert per_seed.max() <= 4
        if options.get("disjoint") or options.get("time_attr"):
            assert torch.equal(batch.batch[:batch.batch_size], torch.arange(batch.batch_size))
        if options.get("time_attr"):  # nothing later than its tree's seed
            assert (data.time[batch.n_id] <= data.time[batch.n_id[batch.batch]]).all()
        if options.get("weight_attr"):  # a node with at least 4 weighted in-edges takes no weightless one
            seed_of = batch.edge_index[1][:batch.num_sampled_edges[0]]
            weighted = torch.bincount(data.edge_index[1][data.weight > 0], minlength=N)[batch.n_id[seed_of]]
            assert (data.weight[batch.e_id[:seed_of.numel()]][weighted >= 4] > 0).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_neighbor_loader_on_a_cuda_graph(data: Data) -> None:
    """A graph on a GPU: PyG's sampler copies its CSC to the host and samples
    there (through torchplug's CPU kernel), then gathers the features on the
    GPU; the batches are subgraphs as on the CPU (Data.to moves in place:
    the loader gets a clone)."""
    with torchplug.pyg.enabled():
        batches = list(NeighborLoader(data.clone().to("cuda"), num_neighbors=[4, 3], batch_size=10,
                                      input_nodes=torch.arange(0, N, 3)))
    assert len(batches) == 4
    for batch in batches:
        assert batch.x.is_cuda and batch.edge_index.is_cuda
        assert_subgraph(batch.to("cpu"), data)
        assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])


def test_link_neighbor_loader_batches_are_subgraphs(data: Data) -> None:
    with torchplug.pyg.enabled():
        loader = LinkNeighborLoader(data, num_neighbors=[3, 2], batch_size=16,
                                    edge_label_index=data.edge_index[:, :64], neg_sampling_ratio=1.0)
        batches = list(loader)
    assert len(batches) == 4
    for batch in batches:
        assert_subgraph(batch, data)
        assert batch.edge_label_index.shape == (2, 32) and batch.edge_label.sum() == 16


def test_same_seed_same_batches(data: Data) -> None:
    def first_batch() -> Data:
        torch.manual_seed(5)
        return next(iter(NeighborLoader(data, num_neighbors=[5, 5], batch_size=20, shuffle=True)))

    with torchplug.pyg.enabled():
        one, two = first_batch(), first_batch()
    assert torch.equal(one.n_id, two.n_id) and torch.equal(one.edge_index, two.edge_index)


def test_node2vec_walks_follow_edges(data: Data) -> None:
    """Node2Vec with p, q other than 1 (pyg-lib takes only 1): its positive
    samples are windows of walks along the graph's edges."""
    edge_index = torch.cat([data.edge_index, data.edge_index.flip(0)], dim=1)
    with torchplug.pyg.enabled():
        model = Node2Vec(edge_index, 8, walk_length=6, context_size=3, p=0.5, q=2.0, num_nodes=N)
        walks = model.pos_sample(torch.arange(20))
    edges = set(map(tuple, edge_index.t().tolist()))
    for walk in walks.tolist():
        assert all(a == b or (a, b) in edges for a, b in zip(walk, walk[1:]))


def test_disable_restores_flags_and_ops() -> None:
    before = {name: getattr(torch_geometric.typing, name) for name in
              ("WITH_PYG_LIB", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE", "WITH_WEIGHTED_NEIGHBOR_SAMPLE")}
    had_op = "neighbor_sample" in vars(torch.ops.pyg)
    with torchplug.pyg.enabled():
        assert torch_geometric.typing.WITH_PYG_LIB is True
        assert torch.ops.pyg.neighbor_sample is torchplug.neighbor_sample
    assert {name: getattr(torch_geometric.typing, name) for name in before} == before
    assert ("neighbor_sample" in vars(torch.ops.pyg)) == had_op


@pytest.mark.skipif(importlib.util.find_spec("pyg_lib") is not None
                    or importlib.util.find_spec("torch_sparse") is not None,
                    reason="PyG has a sampler of its own here")
def test_without_the_backend_pyg_has_no_sampler(data: Data) -> None:
    loader = NeighborLoader(data, num_neighbors=[2], batch_size=4)
    with pytest.raises(ImportError):
        next(iter(loader))


@pytest.mark.parametrize("disjoint", [False, True], ids=["shared", "disjoint"])
def test_hetero_neighbor_loader_batches_are_subgraphs(disjoint: bool) -> None:
    """Papers and authors: every batch's edges of each type are the input's,
    between nodes of their types, the seeds (papers) first."""
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(1)
    data = HeteroData()
    data["paper"].x, data["author"].x = torch.randn(40, 3, generator=g), torch.randn(25, 3, generator=g)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, 40, (2, 200), generator=g)
    writes = torch.stack([torch.randint(0, 25, (120,), generator=g), torch.randint(0, 40, (120,), generator=g)])
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    with torchplug.pyg.enabled():
        loader = NeighborLoader(data, num_neighbors=[3, 2], batch_size=8, input_nodes="paper", disjoint=disjoint)
        batches = list(loader)
    assert torch.equal(torch.cat([b["paper"].n_id[:b["paper"].batch_size] for b in batches]), torch.arange(40))
    for batch in batches:
        for (src, rel, dst) in batch.edge_types:
            local = batch[src, rel, dst].edge_index
            edges = torch.stack([batch[src].n_id[local[0]], batch[dst].n_id[local[1]]])
            assert torch.equal(edges, data[src, rel, dst].edge_index[:, batch[src, rel, dst].e_id])
