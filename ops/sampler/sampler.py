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

Randomness comes from ``generator`` (the default generator of the seeds'
device when None): the same seed gives the same result on every run and
thread count.

The graph (and the features :func:`gather_rows` reads) may lie on the
seeds' GPU or, for graphs larger than its memory, in pinned host memory
(``Tensor.pin_memory()``): the CUDA kernels then read it in place over PCIe
(zero-copy), and the results land on the seeds' GPU. ::

    graph = (colptr.pin_memory(), row.pin_memory())
    _, _, node_id, _, _, _ = torchplug.neighbor_sample(*graph, seed.cuda(), [15, 10, 5], csc=True)
    x_batch = torchplug.gather_rows(x.pin_memory(), node_id)   # on the GPU
"""

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["gather_rows", "hetero_neighbor_sample", "neighbor_sample", "random_walk", "subgraph"]


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


def hetero_neighbor_sample(node_types: List[str], edge_types: List[Tuple[str, str, str]],
                           rowptr_dict: Dict[str, Tensor], col_dict: Dict[str, Tensor], seed_dict: Dict[str, Tensor],
                           num_neighbors_dict: Dict[str, List[int]],
                           node_time_dict: Optional[Dict[str, Tensor]] = None,
                           edge_time_dict: Optional[Dict[str, Tensor]] = None,
                           seed_time_dict: Optional[Dict[str, Tensor]] = None,
                           edge_weight_dict: Optional[Dict[str, Tensor]] = None, csc: bool = False,
                           replace: bool = False, directed: bool = True, disjoint: bool = False,
                           temporal_strategy: str = "uniform", return_edge_id: bool = True,
                           generator: Optional[torch.Generator] = None):
    """:func:`neighbor_sample` over a heterogeneous graph, with pyg-lib's
    arguments: the dictionaries are keyed by node type, or by edge type as
    ``"src__rel__dst"``; each edge type's CSR runs from its source type to its
    destination type (its transpose with ``csc``). Hop by hop, edge type by
    edge type (in ``edge_types``' order), the nodes of the expanded type found
    in the previous hop pick ``num_neighbors_dict[edge type][hop]`` edges, and
    their neighbours join their own type's nodes. Trees (``disjoint``) are
    numbered across node types in ``seed_dict``'s order.

    Returns:
        ``(row, col, node_id, edge_id, nodes per hop, edges per hop)`` as
        dictionaries by edge type (row, col, edge_id, edges) and node type.
    """
    keys = ["__".join(edge_type) for edge_type in edge_types if "__".join(edge_type) in rowptr_dict]
    types = list(seed_dict) + [t for t in node_types if t not in seed_dict]
    index = {t: i for i, t in enumerate(types)}
    src = [index[key.split("__")[0]] for key in keys]
    dst = [index[key.split("__")[-1]] for key in keys]

    def per(names: List[str], values: Optional[Dict[str, Tensor]]) -> List[Optional[Tensor]]:
        return [] if values is None else [values.get(name) for name in names]

    hops = max((len(fanouts) for fanouts in num_neighbors_dict.values()), default=0)
    if not keys:  # no edges to sample: the seeds alone
        return _seeds_alone(types, seed_dict, hops, disjoint, return_edge_id)
    fanouts = [n for key in keys for n in (list(num_neighbors_dict.get(key, [])) + [0] * hops)[:hops]]
    row, col, node_id, edge_id, nodes, edges = torch.ops.torchplug.hetero_neighbor_sample(
        [rowptr_dict[k] for k in keys], [col_dict[k] for k in keys], src, dst, per(types, seed_dict), fanouts,
        per(types, node_time_dict), per(keys, edge_time_dict), per(types, seed_time_dict),
        per(keys, edge_weight_dict), csc, replace, directed, disjoint, temporal_strategy, return_edge_id, generator)
    return (dict(zip(keys, row)), dict(zip(keys, col)), dict(zip(types, node_id)),
            dict(zip(keys, edge_id)) if return_edge_id else None,
            {t: nodes[i * (hops + 1):(i + 1) * (hops + 1)] for i, t in enumerate(types)},
            {k: edges[i * hops:(i + 1) * hops] for i, k in enumerate(keys)})


def _seeds_alone(types: List[str], seed_dict: Dict[str, Tensor], hops: int, disjoint: bool, return_edge_id: bool):
    """hetero_neighbor_sample's result for a graph without edge types."""
    node_id, first = {}, 0
    for t in types:
        seed = seed_dict.get(t)
        if seed is None:
            seed = next(iter(seed_dict.values())).new_empty(0)
        if disjoint:
            trees = torch.arange(first, first + seed.numel(), dtype=seed.dtype, device=seed.device)
            node_id[t], first = torch.stack([trees, seed], 1), first + seed.numel()
        else:
            node_id[t] = seed
    nodes = {t: [int(seed_dict[t].numel()) if t in seed_dict else 0] + [0] * hops for t in types}
    return {}, {}, node_id, {} if return_edge_id else None, nodes, {}


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


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` on ``index``'s device: ``x [N, *]`` of any dtype lies
    there or, for an ``index`` on a GPU, in pinned host memory, read in place
    (a mini-batch's features from a host-resident feature matrix).

    Args:
        x: ``[N, *]``; contiguous where it lies in host memory.
        index: ``[n]`` int32 or int64, values in ``[0, N)``. On CUDA an
            index outside it gives a zero row, or an IndexError in checked
            mode (``torchplug.set_checks``), as on the CPU.

    Returns:
        ``[n, *]`` of ``x``'s dtype. Not differentiable.
    """
    return torch.ops.torchplug.gather_rows(x, index)
