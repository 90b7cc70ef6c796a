"""Plain-Python references of the sampler's ops, for small graphs: loops and
lists, no speed. Used by ops/sampler/test_sampler.py and sampler_rows.py.

- :func:`neighbor_sample_reference` follows pyg-lib's ``neighbor_sample``
  (relabelling, per-hop counts, ``csc``, ``disjoint``, temporal windows,
  ``directed=False`` as the induced subgraph). Its random picks go through an
  injected *chooser*; :func:`replay` makes one from a torchplug result, so
  :func:`assert_replays` asserts that the result is exactly what the
  reference gives with the same picks.
- :func:`check_neighbor_sample` asserts a result's structural invariants
  without knowing its picks; :func:`check_random_walk` a walk's.
- :func:`node2vec_weights`: node2vec's unnormalised step weights, with
  torchplug's neighbourhood (``x`` is a neighbour of ``t`` when ``t -> x``).
- :func:`walk_reference` (graphs where no step has a choice) and
  :func:`subgraph_reference`.
- Graphs for the tests: :func:`csr`, :func:`random_graph`,
  :func:`one_out_edge_graph`.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

#: ``choose(candidates, k, replace, weights, hop, src) -> k edge positions``:
#: the random picks of frontier node ``src`` (a local id) at ``hop``, among
#: its ``candidates`` (ascending edge positions, already cut by time), in the
#: order they are recorded. ``weights`` is None (uniform) or the candidates'
#: edge weights. Never called for a whole neighbourhood.
Chooser = Callable[[List[int], int, bool, Optional[List[float]], int, int], List[int]]
SampleOut = Tuple[Tensor, Tensor, Tensor, Optional[Tensor], List[int], List[int]]


def _list(t: Optional[Tensor]) -> Optional[list]:
    return None if t is None else t.reshape(-1).tolist()


def _root_times(seed: List[int], node_time, seed_time) -> Optional[List[int]]:
    """Each tree's time: seed_time, else its seed's node time (None: not temporal)."""
    if seed_time is not None:
        return _list(seed_time)
    return None if node_time is None else [node_time[s] for s in seed]


def candidates(rowptr: List[int], col: List[int], v: int, count: int, root_time: Optional[int],
               node_time: Optional[List[int]], edge_time: Optional[List[int]], last: bool) -> List[int]:
    """The edge positions of ``v`` that may be picked: all of them, or
    (temporal) those not later than ``root_time``, a prefix since every
    neighbourhood is sorted by time; ``last`` keeps the latest ``count``."""
    edges = list(range(rowptr[v], rowptr[v + 1]))
    if root_time is None:
        return edges
    times = [edge_time[e] if edge_time is not None else node_time[col[e]] for e in edges]
    if times != sorted(times):
        raise ValueError(f"node {v}: neighbourhood not sorted by time")
    valid = [e for e, t in zip(edges, times) if t <= root_time]
    if last and count >= 0:
        valid = valid[max(0, len(valid) - count):]
    return valid


def picks(count: int, population: int, replace: bool) -> Tuple[int, bool]:
    """(how many edges a node with ``population`` candidates gives, whether
    that is its whole neighbourhood, in order)."""
    if population == 0 or count == 0:
        return 0, False
    if count < 0 or (not replace and count >= population):
        return population, True
    return count, False


def neighbor_sample_reference(rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: Sequence[int],
                              node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                              seed_time: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None,
                              csc: bool = False, replace: bool = False, directed: bool = True,
                              disjoint: bool = False, temporal_strategy: str = "uniform",
                              return_edge_id: bool = True, choose: Optional[Chooser] = None) -> SampleOut:
    """torchplug.neighbor_sample's result for the picks ``choose`` makes
    (needed only where a neighbourhood is not taken whole)."""
    ptr, nbr, seeds = rowptr.tolist(), col.tolist(), seed.tolist()
    ntime, etime, weight = _list(node_time), _list(edge_time), _list(edge_weight)
    roots = _root_times(seeds, ntime, seed_time) if ntime is not None or etime is not None else None
    keys: list = [(b, s) for b, s in enumerate(seeds)] if disjoint else list(seeds)
    local: Dict = {}
    for i, key in enumerate(keys):  # a repeated seed keeps its place; reaching it names its first
        local.setdefault(key, i)
    src, dst, eid = [], [], []
    nodes_per_hop, edges_per_hop = [len(seeds)], []
    begin, end = 0, len(keys)
    for hop, count in enumerate(num_neighbors):
        recorded = len(eid)
        for i in range(begin, end):
            tree, v = keys[i] if disjoint else (0, keys[i])
            cands = candidates(ptr, nbr, v, count, None if roots is None else roots[tree], ntime, etime,
                               temporal_strategy == "last")
            k, whole = picks(count, len(cands), replace)
            if k == 0:
                continue
            if whole:
                chosen = cands
            else:
                if choose is None:
                    raise ValueError(f"hop {hop}, node {i}: a random pick needs a chooser")
                chosen = list(choose(cands, k, replace, None if weight is None else [weight[e] for e in cands],
                                     hop, i))
                assert len(chosen) == k and set(chosen) <= set(cands), f"hop {hop}, node {i}: bad picks {chosen}"
            for e in chosen:
                key = (tree, nbr[e]) if disjoint else nbr[e]
                if key not in local:
                    local[key] = len(keys)
                    keys.append(key)
                src.append(i)
                dst.append(local[key])
                eid.append(e)
        edges_per_hop.append(len(eid) - recorded)
        begin, end = end, len(keys)
        nodes_per_hop.append(end - begin)
    if not directed:  # every edge among the sampled nodes, node by node
        src, dst, eid, edges_per_hop = [], [], [], []
        for i, v in enumerate(keys):
            for e in range(ptr[v], ptr[v + 1]):
                if nbr[e] in local:
                    src.append(i)
                    dst.append(local[nbr[e]])
                    eid.append(e)
    dtype = seed.dtype
    node_id = torch.tensor(keys, dtype=dtype).view(-1, 2) if disjoint else torch.tensor(keys, dtype=dtype)
    row, out_col = torch.tensor(src, dtype=dtype), torch.tensor(dst, dtype=dtype)
    if csc:
        row, out_col = out_col, row
    edge_id = torch.tensor(eid, dtype=dtype) if return_edge_id else None
    return row, out_col, node_id, edge_id, nodes_per_hop, edges_per_hop


def _sources(out: SampleOut, csc: bool) -> Tuple[List[int], List[int]]:
    """(local id of the node each edge was sampled for, of the node it reached)."""
    row, col = out[0].tolist(), out[1].tolist()
    return (col, row) if csc else (row, col)


def replay(out: SampleOut, csc: bool = False) -> Chooser:
    """The chooser that makes ``out``'s picks (it needs ``out``'s edge ids)."""
    src, _ = _sources(out, csc)
    eids = out[3].tolist()
    chosen: Dict[Tuple[int, int], List[int]] = {}
    position = 0
    for hop, n in enumerate(out[5]):
        for p in range(position, position + n):
            chosen.setdefault((hop, src[p]), []).append(eids[p])
        position += n
    return lambda cands, k, replace, weights, hop, i: chosen.get((hop, i), [])


def assert_same_sample(got: SampleOut, want: SampleOut, context: str = "") -> None:
    """Every output equal: tensors in dtype, shape and values, lists as lists."""
    for name, a, b in zip(("row", "col", "node_id", "edge_id"), got[:4], want[:4]):
        if a is None or b is None:
            assert a is None and b is None, f"{context}: {name} {a} != {b}"
            continue
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.cpu(), b), (
            f"{context}: {name}\n got  {a.tolist()}\n want {b.tolist()}")
    assert list(got[4]) == list(want[4]), f"{context}: nodes per hop {got[4]} != {want[4]}"
    assert list(got[5]) == list(want[5]), f"{context}: edges per hop {got[5]} != {want[5]}"


def assert_replays(out: SampleOut, rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: Sequence[int],
                   picks_from: Optional[SampleOut] = None, context: str = "", **options) -> None:
    """``out`` equals the reference replaying ``out``'s own picks (or those of
    ``picks_from``: directed=False keeps no picks, its directed twin does)."""
    source = out if picks_from is None else picks_from
    cpu = tuple(t.cpu() if isinstance(t, Tensor) else t for t in source)
    want = neighbor_sample_reference(rowptr.cpu(), col.cpu(), seed.cpu(), num_neighbors,
                                     choose=replay(cpu, options.get("csc", False)),
                                     **{k: v.cpu() if isinstance(v, Tensor) else v for k, v in options.items()})
    assert_same_sample(out, want, context)


def check_neighbor_sample(out: SampleOut, rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: Sequence[int],
                          node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                          seed_time: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None,
                          csc: bool = False, replace: bool = False, directed: bool = True, disjoint: bool = False,
                          temporal_strategy: str = "uniform", return_edge_id: bool = True) -> None:
    """Asserts what holds of every result, whatever its picks: dtypes and
    shapes, per-hop counts that add up, seeds first, each (tree's) node once,
    every edge an edge of the graph within one tree and its time window,
    edges grouped by hop and ascending source, new nodes numbered as found,
    each node's pick count, no repeated edge without replacement, whole
    neighbourhoods in order, zero weights last; directed=False: exactly the
    induced edges."""
    row, out_col, node_id, edge_id, nodes_per_hop, edges_per_hop = out
    dtype, S, L = seed.dtype, seed.numel(), len(num_neighbors)
    ptr, nbr = rowptr.tolist(), col.tolist()
    for t in (row, out_col, node_id) + ((edge_id,) if return_edge_id else ()):
        assert t.dtype == dtype, f"dtype {t.dtype}, expected {dtype}"
    assert (edge_id is not None) == return_edge_id
    assert row.dim() == 1 and out_col.shape == row.shape and (edge_id is None or edge_id.shape == row.shape)
    assert node_id.shape[1:] == ((2,) if disjoint else ()), f"node_id of shape {tuple(node_id.shape)}"
    tree = node_id[:, 0].tolist() if disjoint else [0] * node_id.size(0)
    node = (node_id[:, 1] if disjoint else node_id).tolist()
    N, E = len(node), row.numel()
    assert len(nodes_per_hop) == L + 1 and nodes_per_hop[0] == S and sum(nodes_per_hop) == N
    if directed:
        assert len(edges_per_hop) == L and sum(edges_per_hop) == E, f"edges per hop {edges_per_hop}, E = {E}"
    else:
        assert list(edges_per_hop) == [], "directed=False has no edges per hop"
    assert node[:S] == seed.tolist() and (not disjoint or tree[:S] == list(range(S))), "the seeds come first"
    keys = list(zip(tree, node))
    assert len(set(keys)) == N, "a node twice (in one tree)"
    assert all(0 <= t < max(S, 1) for t in tree)
    src, dst = _sources(out, csc)
    eids = edge_id.tolist() if edge_id is not None else [None] * E
    for p, (i, j, e) in enumerate(zip(src, dst, eids)):
        assert 0 <= i < N and 0 <= j < N, f"edge {p}: local ids {i}, {j} of {N}"
        assert tree[i] == tree[j], f"edge {p} joins trees {tree[i]} and {tree[j]}"
        edges = range(ptr[node[i]], ptr[node[i] + 1])
        assert (e in edges and nbr[e] == node[j]) if e is not None else node[j] in [nbr[x] for x in edges], (
            f"edge {p}: ({node[i]}, {node[j]}) id {e} is no edge of the graph")
    if not directed:
        local = {v: i for i, v in enumerate(node)}
        want = [(i, local[nbr[e]], e) for i, v in enumerate(node) for e in range(ptr[v], ptr[v + 1])
                if nbr[e] in local]
        got = list(zip(src, dst, eids))
        if not return_edge_id:
            want = [(i, j, None) for i, j, _ in want]
        assert got == want, f"not the induced edges in node order:\n got  {got}\n want {want}"
        return
    ntime, etime, weight = _list(node_time), _list(edge_time), _list(edge_weight)
    roots = _root_times(seed.tolist(), ntime, seed_time) if ntime is not None or etime is not None else None
    start = [sum(nodes_per_hop[:h]) for h in range(L + 2)]
    position = 0
    for hop, count in enumerate(num_neighbors):
        lo, hi = start[hop], start[hop + 1]
        span = range(position, position + edges_per_hop[hop])
        sources = [src[p] for p in span]
        assert sources == sorted(sources) and all(lo <= i < hi for i in sources), f"hop {hop}: sources"
        found = []
        for p in span:
            assert dst[p] < start[hop + 2], f"hop {hop}: edge {p} reaches a later hop"
            if dst[p] >= hi and dst[p] not in found:
                found.append(dst[p])
        assert found == list(range(hi, start[hop + 2])), f"hop {hop}: new nodes not numbered as found"
        for i in range(lo, hi):
            chosen = [eids[p] for p in span if src[p] == i]
            cands = candidates(ptr, nbr, node[i], count, None if roots is None else roots[tree[i]], ntime, etime,
                               temporal_strategy == "last")
            k, whole = picks(count, len(cands), replace)
            assert len(chosen) == k, f"hop {hop}, node {i}: {len(chosen)} edges, expected {k}"
            if edge_id is None:
                continue
            assert set(chosen) <= set(cands), f"hop {hop}, node {i}: {chosen} outside its window {cands}"
            if whole:
                assert chosen == cands, f"hop {hop}, node {i}: whole neighbourhood {chosen} != {cands}"
            elif not replace:
                assert len(set(chosen)) == k, f"hop {hop}, node {i}: an edge twice without replacement"
            if weight is not None and not whole:
                positive = sum(weight[e] > 0 for e in cands)
                assert sum(weight[e] > 0 for e in chosen) == (k if replace else min(k, positive)), (
                    f"hop {hop}, node {i}: a zero-weight edge before a positive one")
        position += edges_per_hop[hop]


def node2vec_weights(rowptr: Tensor, col: Tensor, t: int, v: int, p: float, q: float) -> List[float]:
    """The unnormalised weight of each out-edge ``v -> x`` of a walk that came
    from ``t``: 1/p back to ``t``, 1 where ``t -> x`` is an edge, else 1/q."""
    ptr, nbr = rowptr.tolist(), col.tolist()
    of_t = set(nbr[ptr[t]:ptr[t + 1]])
    return [1 / p if x == t else 1.0 if x in of_t else 1 / q for x in nbr[ptr[v]:ptr[v + 1]]]


def check_random_walk(walks: Tensor, rowptr: Tensor, col: Tensor, seed: Tensor, walk_length: int) -> None:
    """Walks of ``seed``'s dtype and shape [S, walk_length + 1], from the
    seeds, every step along an edge; a node without edges is never left."""
    ptr, nbr = rowptr.tolist(), col.tolist()
    assert walks.dtype == seed.dtype and tuple(walks.shape) == (seed.numel(), walk_length + 1), (
        f"{walks.dtype} {tuple(walks.shape)}")
    assert walks[:, 0].tolist() == seed.tolist(), "walks start at their seeds"
    for w, path in enumerate(walks.tolist()):
        for step, (v, x) in enumerate(zip(path, path[1:])):
            out = nbr[ptr[v]:ptr[v + 1]]
            assert (x in out) if out else x == v, f"walk {w} step {step}: {v} -> {x} is no edge (out: {out})"


def walk_reference(rowptr: Tensor, col: Tensor, seed: Tensor, walk_length: int) -> Tensor:
    """The walks on a graph where every node has at most one out-edge (no
    step has a choice): along it, or in place."""
    ptr, nbr = rowptr.tolist(), col.tolist()
    walks = []
    for v in seed.tolist():
        path = [v]
        for _ in range(walk_length):
            path.append(nbr[ptr[path[-1]]] if ptr[path[-1] + 1] > ptr[path[-1]] else path[-1])
        walks.append(path)
    return torch.tensor(walks, dtype=seed.dtype).view(-1, walk_length + 1)


def subgraph_reference(rowptr: Tensor, col: Tensor, nodes: Tensor,
                       return_edge_id: bool = True) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """The edges among ``nodes`` (distinct) as (rowptr, col as positions in
    ``nodes``, edge positions), row ``i`` being ``nodes[i]``'s edges in order."""
    ptr, nbr, members = rowptr.tolist(), col.tolist(), nodes.tolist()
    position = {v: i for i, v in enumerate(members)}
    assert len(position) == len(members), "nodes must be distinct"
    out_ptr, out_col, eid = [0], [], []
    for v in members:
        for e in range(ptr[v], ptr[v + 1]):
            if nbr[e] in position:
                out_col.append(position[nbr[e]])
                eid.append(e)
        out_ptr.append(len(out_col))
    dtype = nodes.dtype
    return (torch.tensor(out_ptr, dtype=dtype), torch.tensor(out_col, dtype=dtype),
            torch.tensor(eid, dtype=dtype) if return_edge_id else None)


# ---- graphs for the tests


def csr(src: Tensor, dst: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """(rowptr, col) int64 of the edges src -> dst over n nodes, each row's
    edges in their given order."""
    order = torch.sort(src, stable=True).indices
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(src, minlength=n).cumsum(0)])
    return rowptr, dst[order]


def random_graph(n: int, e: int, g: torch.Generator, reached: Optional[int] = None) -> tuple[Tensor, Tensor]:
    """e random edges over n nodes (self-loops and repeated edges included),
    among the first `reached` only when given (the others have no edges)."""
    m = n if reached is None else reached
    return csr(torch.randint(0, m, (e,), generator=g), torch.randint(0, m, (e,), generator=g), n)


def one_out_edge_graph(n: int, g: torch.Generator, isolated: int = 0) -> tuple[Tensor, Tensor]:
    """A graph where each node has one out-edge to a random node, but
    `isolated` nodes that have none: every walk on it is determined."""
    has_edge = torch.ones(n, dtype=torch.bool)
    has_edge[torch.randperm(n, generator=g)[:isolated]] = False
    src = torch.arange(n)[has_edge]
    return csr(src, torch.randint(0, n, (src.numel(),), generator=g), n)
