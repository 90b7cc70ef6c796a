"""torchplug.datasets: the shipped karate club checked on its own and against
networkx, and the synthetic planted-partition graphs."""

from __future__ import annotations

import pytest
import torch

from torchplug.datasets import Graph, karate_club, random_graph


def undirected_pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    """The set of ``(min, max)`` node pairs of ``edge_index`` (``[2, E]``)."""
    return {(min(u, v), max(u, v)) for u, v in edge_index.t().tolist()}


def is_symmetric(edge_index: torch.Tensor) -> bool:
    """Whether every directed edge ``u -> v`` comes with ``v -> u``, with the same multiplicity."""
    forward = sorted(map(tuple, edge_index.t().tolist()))
    backward = sorted(map(tuple, edge_index.flip(0).t().tolist()))
    return forward == backward


def test_karate_club_structure() -> None:
    graph = karate_club()
    assert isinstance(graph, Graph)
    assert graph.num_nodes == 34
    assert graph.x is None
    assert graph.edge_index.dtype == torch.long and graph.y.dtype == torch.long
    assert graph.edge_index.shape == (2, 2 * 78)
    assert graph.y.shape == (34,)
    assert int(graph.edge_index.min()) == 0 and int(graph.edge_index.max()) == 33

    assert len(undirected_pairs(graph.edge_index)) == 78
    assert not bool((graph.edge_index[0] == graph.edge_index[1]).any())
    assert is_symmetric(graph.edge_index)

    degree = torch.bincount(graph.edge_index[0], minlength=34)
    assert int(degree[0]) == 16
    assert int(degree[33]) == 17

    # networkx's 'club' attribute splits the members 17 / 17 (node 8 stayed
    # with Mr. Hi although most of its ties are to the Officer's side).
    assert torch.bincount(graph.y).tolist() == [17, 17]
    assert int(graph.y[0]) == 0 and int(graph.y[33]) == 1
    assert graph.num_classes == 2


def test_karate_club_matches_networkx() -> None:
    nx = pytest.importorskip("networkx")
    reference = nx.karate_club_graph()
    graph = karate_club()

    assert reference.number_of_nodes() == graph.num_nodes
    expected_edges = {(min(u, v), max(u, v)) for u, v in reference.edges()}
    assert undirected_pairs(graph.edge_index) == expected_edges

    club_label = {"Mr. Hi": 0, "Officer": 1}
    expected_y = [club_label[reference.nodes[n]["club"]] for n in sorted(reference.nodes)]
    assert graph.y.tolist() == expected_y


def test_karate_club_device(device: str) -> None:
    graph = karate_club(device)
    assert graph.edge_index.device.type == device
    assert graph.y.device.type == device
    assert torch.equal(graph.edge_index.cpu(), karate_club().edge_index)


def test_random_graph_shapes_and_invariants() -> None:
    graph = random_graph(500, avg_degree=8, num_classes=3, num_features=7, seed=1)
    assert graph.num_nodes == 500
    assert graph.x is not None
    assert graph.x.shape == (500, 7) and graph.x.dtype == torch.float32
    assert graph.y.shape == (500,) and graph.y.dtype == torch.long
    assert graph.num_classes == 3
    assert graph.edge_index.dtype == torch.long and graph.edge_index.size(0) == 2
    assert int(graph.edge_index.min()) >= 0 and int(graph.edge_index.max()) < 500

    assert not bool((graph.edge_index[0] == graph.edge_index[1]).any())
    assert is_symmetric(graph.edge_index)
    assert len(undirected_pairs(graph.edge_index)) * 2 == graph.edge_index.size(1)  # no duplicates
    mean_degree = graph.edge_index.size(1) / graph.num_nodes
    assert 7.0 < mean_degree <= 8.0


def test_random_graph_is_seeded() -> None:
    a, b, c = random_graph(300, seed=5), random_graph(300, seed=5), random_graph(300, seed=6)
    assert torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.y, b.y) and torch.equal(a.x, b.x)
    assert not torch.equal(a.y, c.y)


def test_random_graph_labels_are_learnable() -> None:
    graph = random_graph(4000, num_classes=4, seed=2)
    src, dst = graph.edge_index
    homophily = (graph.y[src] == graph.y[dst]).float().mean().item()
    assert homophily > 0.75  # chance is 0.25

    # Nearest class mean on the raw features beats chance; on features averaged
    # over the neighbourhood it does much better.
    assert graph.x is not None
    neighbour_mean = torch.zeros_like(graph.x).index_add_(0, dst, graph.x[src])
    neighbour_mean /= torch.bincount(dst, minlength=graph.num_nodes).clamp(min=1).unsqueeze(-1)

    def nearest_mean_accuracy(x: torch.Tensor) -> float:
        means = torch.stack([x[graph.y == c].mean(0) for c in range(graph.num_classes)])
        return (torch.cdist(x, means).argmin(-1) == graph.y).float().mean().item()

    raw = nearest_mean_accuracy(graph.x)
    smoothed = nearest_mean_accuracy(neighbour_mean)
    assert raw > 0.4
    assert smoothed > 0.85 and smoothed > raw


def test_random_graph_device(device: str) -> None:
    graph = random_graph(100, seed=3, device=device)
    assert graph.x is not None
    assert {graph.edge_index.device.type, graph.y.device.type, graph.x.device.type} == {device}
    assert torch.equal(graph.y.cpu(), random_graph(100, seed=3).y)


def test_random_graph_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="num_nodes"):
        random_graph(1)
