"""Sampling subgraphs for mini-batch training, over ``torch.ops.torchplug``,
with pyg-lib's argument names, defaults and result order
(``pyg_lib.sampler``) plus ``generator``.

A graph is a CSR ``(rowptr [N + 1], col [E])``; ``rowptr``, ``col`` and the
seeds share one index dtype (int32 or int64), and the index results have it
too. PyG hands its samplers the CSC of ``edge_index`` (``csc=True``): each
node's row then lists the sources of its incoming edges. ::

    row, col, node_id, edge_id, nodes_per_hop, edges_per_hop = torchplug.neighbor_sample(
        colptr, row, seed, [15, 10, 5], csc=True)
    walks = torchplug.random_walk(rowptr, col, start, walk_length=20, p=1.0, q=0.5)

Randomness comes from ``generator`` (the default generator of the inputs'
device when None): the same seed gives the same result on every run and
thread count.
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["neighbor_sample", "random_walk", "subgraph"]


def neighbor_sample(rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: List[int],
                    node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                    seed_time: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None, csc: bool = False,
                    replace: bool = False, directed: bool = True, disjoint: bool = False,
                    temporal_strategy: str = "uniform", return_edge_id: bool = True,
                    generator: Optional[torch.Generator] = None,
                    ) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor], List[int], List[int]]:
    """Samples ``num_neighbors[h]`` edges (-1: all) of every node reached at
    hop ``h - 1``, from the seeds.

    Args:
        node_time, edge_time: int64 ``[N]`` or ``[E]`` (one of them; needs
            ``disjoint``): an edge to a node (an edge) later than its tree's
            ``seed_time`` (default: its seed's node time) is never sampled.
            Each neighbourhood must be sorted by that time.
        edge_weight: float ``[E]``: picks weighted by it.
        csc: the graph is a CSC; ``row`` then holds the sampled neighbours
            (the messages' sources) and ``col`` the nodes they were sampled for.
        replace: picks with replacement (``num_neighbors[h]`` of them even
            where fewer edges exist).
        directed: False returns every edge among the sampled nodes instead
            (the induced subgraph; no edges per hop).
        disjoint: one tree per seed: ``node_id`` is ``[n, 2]`` of (tree, node).
        temporal_strategy: ``"uniform"`` over the edges in time, or ``"last"``:
            the ``num_neighbors[h]`` latest.

    Returns:
        ``(row [e], col [e])`` local node ids of the sampled edges, ``node_id``
        (global ids: the seeds, then each hop's new nodes in order of
        discovery), ``edge_id [e]`` (positions in ``col``, or None), the nodes
        per hop (the seeds first, ``len(num_neighbors) + 1``) and the edges
        per hop.
    """
    return torch.ops.torchplug.neighbor_sample(rowptr, col, seed, num_neighbors, node_time, edge_time, seed_time,
                                               edge_weight, csc, replace, directed, disjoint, temporal_strategy,
                                               return_edge_id, generator)


def random_walk(rowptr: Tensor, col: Tensor, seed: Tensor, walk_length: int, p: float = 1.0, q: float = 1.0,
                generator: Optional[torch.Generator] = None) -> Tensor:
    """Walks ``[S, walk_length + 1]`` from each seed (column 0). Each step
    takes a uniform edge (p = q = 1), or node2vec's second-order step from
    ``t`` through ``v``: an edge ``v -> x`` weighs ``1 / p`` if ``x`` is
    ``t``, 1 if ``t -> x`` is an edge, ``1 / q`` otherwise (sampled exactly,
    by rejection). A node without edges keeps the walk where it is."""
    return torch.ops.torchplug.random_walk(rowptr, col, seed, walk_length, p, q, generator)


def subgraph(rowptr: Tensor, col: Tensor, nodes: Tensor, return_edge_id: bool = True,
             ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """The edges among ``nodes`` (distinct): ``(rowptr [len(nodes) + 1], col
    (positions in nodes), edge_id (positions in the input col, or None))``,
    row ``i`` being ``nodes[i]``'s edges in their input order."""
    return torch.ops.torchplug.subgraph(rowptr, col, nodes, return_edge_id)
