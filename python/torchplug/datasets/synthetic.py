"""Synthetic node-classification graphs of any size."""

from __future__ import annotations

from typing import Optional, Union

import torch

from .graph import Graph

#: Fraction of edge draws that stay inside the source node's class.
HOMOPHILY: float = 0.8

#: Standard deviation of the Gaussian noise around each class's feature centre.
FEATURE_NOISE: float = 4.0


def random_graph(
    num_nodes: int,
    avg_degree: int = 10,
    num_classes: int = 4,
    num_features: int = 32,
    seed: int = 0,
    device: Optional[Union[str, torch.device]] = None,
) -> Graph:
    """A planted-partition graph whose labels are learnable from features and edges.

    Every node gets a uniform random class. ``num_nodes * avg_degree / 2``
    edges are drawn from uniform random sources; a fraction :data:`HOMOPHILY`
    of them end at a uniform node of the source's class, the rest at any
    uniform node. Self loops and duplicates are dropped, so the mean degree is
    slightly under ``avg_degree``. Features are a random per-class centre plus
    Gaussian noise (std :data:`FEATURE_NOISE`): alone they classify a node
    only roughly; averaged over its mostly same-class neighbours they do well.
    The same ``seed`` gives the same graph on every device.

    Args:
        num_nodes: ``N``, at least 2.
        avg_degree: target mean number of neighbours per node.
        num_classes: ``C``, number of classes.
        num_features: ``F``, feature width.
        seed: seed of the generator that draws everything.
        device: where to put the tensors; CPU when ``None``.

    Returns:
        ``Graph`` with ``edge_index`` ``[2, E]`` int64 (undirected, both
        directions), ``y`` ``[N]`` int64 in ``[0, C)``, ``x`` ``[N, F]``
        float32 and ``num_nodes = N``.
    """
    if num_nodes < 2 or avg_degree < 1 or num_classes < 1 or num_features < 1:
        raise ValueError(
            "random_graph: need num_nodes >= 2 and avg_degree, num_classes, num_features >= 1"
        )
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(num_classes, (num_nodes,), generator=gen)

    num_draws = num_nodes * avg_degree // 2
    src = torch.randint(num_nodes, (num_draws,), generator=gen)
    # A same-class destination: a uniform position in src's class's block of
    # the nodes sorted by class.
    by_class = torch.argsort(y, stable=True)
    counts = torch.bincount(y, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    src_class = y[src]
    offset = (torch.rand(num_draws, generator=gen) * counts[src_class]).long()
    same_class_dst = by_class[starts[src_class] + offset]
    any_dst = torch.randint(num_nodes, (num_draws,), generator=gen)
    stay = torch.rand(num_draws, generator=gen) < HOMOPHILY
    dst = torch.where(stay, same_class_dst, any_dst)

    # Undirected and simple: order each pair, drop self loops and duplicates.
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    keys = torch.unique(lo[lo != hi] * num_nodes + hi[lo != hi])
    one_way = torch.stack([keys // num_nodes, keys % num_nodes])
    edge_index = torch.cat([one_way, one_way.flip(0)], dim=1)

    centres = torch.randn(num_classes, num_features, generator=gen)
    x = centres[y] + FEATURE_NOISE * torch.randn(num_nodes, num_features, generator=gen)
    return Graph(
        edge_index=edge_index.to(device), y=y.to(device), num_nodes=num_nodes, x=x.to(device)
    )


def power_law_graph(
    num_nodes: int,
    avg_degree: int = 10,
    exponent: float = 2.5,
    num_classes: int = 4,
    num_features: int = 32,
    seed: int = 0,
    device: Optional[Union[str, torch.device]] = None,
) -> Graph:
    """A Chung-Lu graph with power-law degrees whose labels are learnable.

    Node ``i`` gets the weight ``(i + 1) ** (-1 / (exponent - 1))``, so that
    the expected degrees follow a power law of that exponent (2 to 2.5 for
    citation, social and product graphs). ``num_nodes * avg_degree / 2``
    edges are drawn with both ends chosen in proportion to the weights; a
    fraction :data:`HOMOPHILY` of them end inside the source's class (again
    in proportion to the weights). Self loops are dropped and both directions
    kept; duplicates stay (a multigraph, as Chung-Lu's). Labels and features
    are :func:`random_graph`'s. The same ``seed`` gives the same graph.

    Returns:
        ``Graph`` as :func:`random_graph`'s, with hubs: node 0 has about
        ``num_nodes ** (1 / (exponent - 1))`` times node ``num_nodes - 1``'s degree.
    """
    if num_nodes < 2 or avg_degree < 1 or num_classes < 1 or num_features < 1 or exponent <= 1:
        raise ValueError("power_law_graph: need num_nodes >= 2, exponent > 1 and avg_degree, num_classes, "
                         "num_features >= 1")
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(num_classes, (num_nodes,), generator=gen)
    weight = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow(-1 / (exponent - 1))

    num_draws = num_nodes * avg_degree // 2
    cumulative = weight.cumsum(0)
    src = torch.searchsorted(cumulative, torch.rand(num_draws, generator=gen, dtype=torch.float64)
                             * cumulative[-1]).clamp_(max=num_nodes - 1)
    # A same-class destination: a weighted draw inside src's class's block of
    # the nodes sorted by class.
    by_class = torch.argsort(y, stable=True)
    class_cumulative = weight[by_class].cumsum(0)
    ends = torch.bincount(y, minlength=num_classes).cumsum(0)
    high = class_cumulative[ends - 1]
    low = torch.cat([torch.zeros(1, dtype=torch.float64), high[:-1]])
    src_class = y[src]
    u = low[src_class] + torch.rand(num_draws, generator=gen, dtype=torch.float64) * (high - low)[src_class]
    same_class_dst = by_class[torch.searchsorted(class_cumulative, u).clamp_(max=num_nodes - 1)]
    any_dst = torch.searchsorted(cumulative, torch.rand(num_draws, generator=gen, dtype=torch.float64)
                                 * cumulative[-1]).clamp_(max=num_nodes - 1)
    stay = torch.rand(num_draws, generator=gen) < HOMOPHILY
    dst = torch.where(stay, same_class_dst, any_dst)
    kept = src != dst
    edge_index = torch.stack([src[kept], dst[kept]])
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)

    centres = torch.randn(num_classes, num_features, generator=gen)
    x = centres[y] + FEATURE_NOISE * torch.randn(num_nodes, num_features, generator=gen)
    return Graph(edge_index=edge_index.to(device), y=y.to(device), num_nodes=num_nodes, x=x.to(device))
