"""neighbor_sample, random_walk and subgraph against sampler_reference.py.

- Structure: on many small random graphs (int32 and int64, csr and csc,
  with and without replacement, weighted, disjoint, temporal by node and by
  edge time, 'uniform' and 'last', directed=False) a result equals the
  reference replaying the result's own picks, and meets every structural
  invariant (check_neighbor_sample).
- Distribution: chi-square tests (fixed seeds, so deterministic) that each
  neighbour is drawn with its probability, uniform and weighted, with and
  without replacement (pairs and triples without replacement, and inclusion
  frequencies); node2vec's return and in-out biases against their
  definition; uniform walk steps.
- Temporal windows against the root's time, 'last', sortedness errors;
  fanouts past the degree; isolated nodes; empty seeds, zero hops, empty
  graphs; the same generator seed gives the same bits at 1, 2 and 8 threads;
  subgraph; errors that name the op and the argument; random_walk's Meta
  kernel, opcheck and torch.compile.

- On a GPU: the same tests on CUDA; CUDA's sample is the CPU's for the same
  generator seed, in every mode, where the fanouts bound the sizes (one
  read-back a batch) and where they do not (one more a hop); the errors the
  kernels find raise at the batch's end; a graph in pinned host memory
  samples as the same graph in device memory; gather_rows.
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations, permutations
from typing import Optional

import pytest
import torch
from torch import Tensor
from torch.library import opcheck

import torchplug
from sampler_reference import (assert_replays, assert_same_sample, check_neighbor_sample, check_random_walk, csr,
                               neighbor_sample_reference, node2vec_weights, one_out_edge_graph, random_graph,
                               subgraph_reference, walk_reference)

INDEX_DTYPES = [torch.int32, torch.int64]
#: A chi-square test fails below this p-value. The draws are seeded, so each
#: test is deterministic; a wrong distribution gives p-values far below it at
#: these sample sizes (test_chi_square_rejects_a_wrong_distribution).
ALPHA = 1e-6
L = torch.long


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def needs(device: str, *ops: str) -> None:
    """Skips the test where one of `ops` has no kernel for `device` (the
    registry's backends: no CUDA kernels yet)."""
    backends = {info.name: info.backends for info in torchplug.registry() if info.namespace == "torchplug"}
    for op in ops:
        if device.upper() not in backends[op]:
            pytest.skip(f"torchplug::{op} has no {device.upper()} kernel yet")


def to(device, *tensors):
    return tuple(None if t is None else t.to(device) for t in tensors)


def sample(rowptr, col, seed, num_neighbors, device: str = "cpu", generator: int = 0, **options):
    """torchplug.neighbor_sample on `device` from gen(generator), its outputs on the CPU."""
    options = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in options.items()}
    out = torchplug.neighbor_sample(*to(device, rowptr, col, seed), num_neighbors, generator=gen(generator),
                                    **options)
    return tuple(t.cpu() if isinstance(t, Tensor) else t for t in out)


def chi_square_p(counts: Tensor, probs: Tensor) -> float:
    """The p-value of `counts` (a multinomial draw) under `probs`: scipy's
    chi2.sf where scipy is installed, else the same survival function from
    torch.special.gammaincc."""
    counts, probs = counts.double(), probs.double() / probs.sum()
    expected = counts.sum() * probs
    assert (expected >= 5).all(), f"too few draws for a chi-square test: expected {expected.tolist()}"
    stat, df = float(((counts - expected) ** 2 / expected).sum()), counts.numel() - 1
    try:
        from scipy.stats import chi2
    except ImportError:
        return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                             torch.tensor(stat / 2, dtype=torch.float64)))
    return float(chi2.sf(stat, df))


def assert_fits(counts: Tensor, probs: Tensor, what: str) -> None:
    """`counts` fit `probs` (chi-square); bins of probability 0 hold nothing."""
    probs = torch.as_tensor(probs, dtype=torch.float64)
    counts = torch.as_tensor(counts, dtype=torch.float64)
    zero = probs == 0
    assert (counts[zero] == 0).all(), f"{what}: drawn where the probability is 0: {counts.tolist()}"
    p = chi_square_p(counts[~zero], probs[~zero])
    expected = (counts.sum() * probs / probs.sum()).tolist()
    assert p > ALPHA, f"{what}: chi-square p = {p:.3g}\n counts   {counts.tolist()}\n expected {expected}"


def assert_frequency(count: int, trials: int, prob: float, what: str) -> None:
    """`count` successes of `trials` within 5 standard deviations of `prob`."""
    sd = math.sqrt(trials * prob * (1 - prob))
    assert abs(count - trials * prob) <= 5 * sd, f"{what}: {count} of {trials}, expected {trials * prob:.1f}"


# ---- graphs ------------------------------------------------------------------------------


def star(weights_or_degree) -> tuple[Tensor, Tensor]:
    """Node 0 with edges to 1..d (positions 0..d-1), nodes 1..d without edges."""
    d = weights_or_degree if isinstance(weights_or_degree, int) else len(weights_or_degree)
    return torch.tensor([0] + [d] * (d + 1)), torch.arange(1, d + 1)


def picks_of(out, trees: int, k: int) -> Tensor:
    """The edge ids tree b picked at hop 0 (one frontier node a tree), [trees, k]."""
    assert out[5][0] == trees * k, f"{out[5][0]} edges at hop 0, expected {trees} x {k}"
    return out[3][:trees * k].view(trees, k)


def rows_of(rowptr: Tensor) -> Tensor:
    return torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())


def sorted_by(rowptr: Tensor, key: Tensor) -> Tensor:
    """The edge permutation that sorts each row's edges by `key` (stably)."""
    rows = rows_of(rowptr)
    order = torch.sort(key, stable=True).indices
    return order[torch.sort(rows[order], stable=True).indices]


def case(mode: str, g: torch.Generator, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, dict]:
    """(rowptr, col, seed, options) of a small random graph for `mode`:
    neighbourhoods sorted by time for the temporal modes, repeated seeds in
    the disjoint ones."""
    n = int(torch.randint(1, 20, (1,), generator=g))
    rowptr, col = random_graph(n, int(torch.randint(0, 4 * n + 1, (1,), generator=g)), g)
    E = col.numel()
    disjoint = mode in ("disjoint", "node_time", "node_time_seed_time", "node_time_last", "edge_time",
                        "edge_time_last") or (mode == "weighted" and bool(torch.randint(0, 2, (1,), generator=g)))
    count = int(torch.randint(1, 6, (1,), generator=g))
    seed = torch.randint(0, n, (count,), generator=g) if disjoint else torch.randperm(n, generator=g)[:count]
    options: dict = dict(disjoint=disjoint)
    if mode == "weighted":
        w = torch.rand(E, generator=g, dtype=torch.float64)
        w[torch.rand(E, generator=g) < 0.25] = 0
        w[rowptr[:-1][rowptr.diff() > 0]] = 0.5  # a positive weight in each neighbourhood (replace=True needs one)
        options["edge_weight"] = w.to(torch.float32 if E % 2 else torch.float64)
    elif mode.startswith("node_time"):
        node_time = torch.randint(0, 6, (n,), generator=g)
        col = col[sorted_by(rowptr, node_time[col])]
        options["node_time"] = node_time
        if mode == "node_time_seed_time":
            options["seed_time"] = torch.randint(0, 6, (count,), generator=g)
    elif mode.startswith("edge_time"):
        edge_time = torch.randint(0, 6, (E,), generator=g)
        order = sorted_by(rowptr, edge_time)
        col, options["edge_time"] = col[order], edge_time[order]
        options["seed_time"] = torch.randint(0, 7, (count,), generator=g)
    if mode.endswith("_last"):
        options["temporal_strategy"] = "last"
    if mode == "undirected":
        options["directed"] = False
    return rowptr.to(dtype), col.to(dtype), seed.to(dtype), options


FANOUTS = [[2], [3, 2], [1, -1], [2, 0, 3], [-1, 2], [4, 4, 1], [6, 1]]
MODES = ["plain", "weighted", "disjoint", "node_time", "node_time_seed_time", "node_time_last", "edge_time",
         "edge_time_last", "undirected"]


# ---- structure: replay and invariants ----------------------------------------------------


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_replays_the_reference(mode: str, dtype: torch.dtype, device: str) -> None:
    """Every output equals the reference's with the result's own picks, and
    the invariants hold, on small random graphs, csr and csc, with and
    without replacement. directed=False records no picks: its directed twin
    (the same generator seed draws the same picks) supplies them."""
    needs(device, "neighbor_sample")
    g = gen(MODES.index(mode))
    for k in range(6):
        rowptr, col, seed, options = case(mode, g, dtype)
        fanout = FANOUTS[k % len(FANOUTS)]
        for csc in (False, True):
            for replace in (False, True):
                kw = dict(options, csc=csc, replace=replace)
                context = f"graph {k}, {fanout}, {kw}"
                s = 100 * k + 2 * csc + replace
                out = sample(rowptr, col, seed, fanout, device, s, **kw)
                check_neighbor_sample(out, rowptr, col, seed, fanout, **kw)
                twin = sample(rowptr, col, seed, fanout, device, s, **dict(kw, directed=True))
                assert_replays(out, rowptr, col, seed, fanout, picks_from=twin, context=context, **kw)


@pytest.mark.parametrize("csc", [False, True])
def test_whole_neighbourhoods_match_pyg_lib(csc: bool, device: str) -> None:
    """pyg-lib's own cases on its 6-cycle (node i -> i - 1, i + 1), written out."""
    needs(device, "neighbor_sample")
    rowptr = torch.arange(0, 13, 2)
    col = torch.tensor([[(i - 1) % 6, (i + 1) % 6] for i in range(6)]).view(-1)
    out = sample(rowptr, col, torch.tensor([2, 3]), [-1, -1], device, csc=csc)
    src, dst = [0, 0, 1, 1, 2, 2, 3, 3], [2, 1, 0, 3, 4, 0, 1, 5]
    assert (out[1] if csc else out[0]).tolist() == src and (out[0] if csc else out[1]).tolist() == dst
    assert out[2].tolist() == [2, 3, 1, 4, 0, 5]
    assert out[3].tolist() == [4, 5, 6, 7, 2, 3, 8, 9]
    assert out[4] == [2, 2, 2] and out[5] == [4, 4]


def test_disjoint_trees_share_no_nodes(device: str) -> None:
    """Four trees from the same seed: node_id [n, 2] of (tree, node); with
    whole neighbourhoods each tree is the same tree, its nodes its own, no
    edge between trees; the non-disjoint call relabels them once."""
    needs(device, "neighbor_sample")
    rowptr, col = random_graph(12, 40, gen(3))
    seed = torch.tensor([5, 5, 5, 5])
    out = sample(rowptr, col, seed, [-1, -1], device, disjoint=True)
    check_neighbor_sample(out, rowptr, col, seed, [-1, -1], disjoint=True)
    single = sample(rowptr, col, seed[:1], [-1, -1], device)
    assert out[2].shape == (4 * single[2].numel(), 2)
    tree, node = out[2].unbind(1)
    for b in range(4):
        assert node[tree == b].tolist() == single[2].tolist(), f"tree {b}"
    assert (tree[out[0]] == tree[out[1]]).all(), "an edge between trees"
    assert out[4] == [4 * n for n in single[4]]


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_edge_ids_are_edges_and_counts_add_up(dtype: torch.dtype, device: str) -> None:
    """On a larger graph (hub nodes, repeated edges): every (row, col) pair is
    the edge its id names, the per-hop counts add up to the outputs' sizes."""
    needs(device, "neighbor_sample")
    g = gen(4)
    src = torch.cat([torch.randint(0, 300, (3000,), generator=g), torch.zeros(500, dtype=L)])
    rowptr, col = csr(src, torch.randint(0, 300, (3500,), generator=g), 300)
    seed = torch.randperm(300, generator=g)[:20]
    for replace in (False, True):
        out = sample(rowptr.to(dtype), col.to(dtype), seed.to(dtype), [10, 5, 3], device, 4, replace=replace)
        node = out[2].long()
        eid = out[3].long()
        assert torch.equal(col[eid], node[out[1].long()]), "an edge id leads elsewhere"
        assert ((rowptr[node[out[0].long()]] <= eid) & (eid < rowptr[node[out[0].long()] + 1])).all()
        assert sum(out[4]) == node.numel() and sum(out[5]) == eid.numel() and len(out[5]) == 3
        check_neighbor_sample(out, rowptr.to(dtype), col.to(dtype), seed.to(dtype), [10, 5, 3], replace=replace)


def test_return_edge_id_false(device: str) -> None:
    needs(device, "neighbor_sample")
    rowptr, col = random_graph(10, 30, gen(5))
    seed = torch.tensor([1, 4])
    with_ids = sample(rowptr, col, seed, [2, 2], device, 7)
    without = sample(rowptr, col, seed, [2, 2], device, 7, return_edge_id=False)
    assert without[3] is None
    assert_same_sample(without, with_ids[:3] + (None,) + with_ids[4:])


# ---- distributions -----------------------------------------------------------------------


def draws(weights_or_degree, k: int, trees: int, replace: bool = False, seed: int = 0,
          weighted: bool = False) -> Tensor:
    """[trees, k] edge positions that `trees` disjoint copies of node 0 of a
    star picked (weighted by `weights_or_degree` with `weighted`)."""
    rowptr, col = star(weights_or_degree)
    w = torch.tensor(weights_or_degree, dtype=torch.float64) if weighted else None
    out = sample(rowptr, col, torch.zeros(trees, dtype=L), [k], "cpu", seed, replace=replace, disjoint=True,
                 edge_weight=w)
    return picks_of(out, trees, k)


def test_chi_square_rejects_a_wrong_distribution() -> None:
    """The test has the power to fail: the uniform picks of a 7-star fit
    the uniform distribution, not one that favours a neighbour by 25%, nor
    a weighted one."""
    d = 7
    picks = draws(d, 1, 14000, seed=1).view(-1)
    counts = torch.bincount(picks, minlength=d)
    assert chi_square_p(counts, torch.ones(d)) > ALPHA
    assert chi_square_p(counts, torch.tensor([1.25] + [1.0] * (d - 1))) < ALPHA
    assert chi_square_p(counts, torch.arange(1.0, d + 1)) < ALPHA


@pytest.mark.parametrize("k", [1, 2, 3])
def test_uniform_without_replacement(k: int) -> None:
    """Every k-subset of a 7-star equally likely, each neighbour included with
    probability k / 7, no neighbour twice."""
    d = 7
    subsets = list(combinations(range(d), k))
    trees = 1000 * len(subsets)
    picks = draws(d, k, trees, seed=10 + k)
    assert all(len(set(row)) == k for row in picks.tolist()), "a neighbour twice without replacement"
    index = {s: i for i, s in enumerate(subsets)}
    counts = torch.bincount(torch.tensor([index[tuple(sorted(row))] for row in picks.tolist()]),
                            minlength=len(subsets))
    assert_fits(counts, torch.ones(len(subsets)), f"{k}-subsets")
    included = torch.bincount(picks.view(-1), minlength=d)
    for e in range(d):
        assert_frequency(int(included[e]), trees, k / d, f"neighbour {e} included")


@pytest.mark.parametrize("k", [64, 65, 70, 99])
def test_uniform_without_replacement_many_picks(k: int) -> None:
    """k of 100 (the picks looked up by a scan up to 64, in a hash set past
    it): distinct, each included with probability k / 100; 99 of 100 leave
    each one out with probability 1 / 100."""
    d, trees = 100, 2000 if k < 99 else 20000
    picks = draws(d, k, trees, seed=k)
    assert (torch.sort(picks, dim=1).values.diff(dim=1) > 0).all(), "a neighbour twice without replacement"
    included = torch.bincount(picks.view(-1), minlength=d)
    if k == 99:
        assert_fits(trees - included, torch.ones(d), "the neighbour left out")
    else:
        for e in range(d):
            assert_frequency(int(included[e]), trees, k / d, f"neighbour {e} included")


@pytest.mark.parametrize("k", [3, 10])
def test_uniform_with_replacement(k: int) -> None:
    """k independent uniform draws from a 7-star, k = 10 past its degree too."""
    d, trees = 7, 5000
    picks = draws(d, k, trees, replace=True, seed=20 + k)
    assert_fits(torch.bincount(picks.view(-1), minlength=d), torch.ones(d), f"{k} draws with replacement")
    # the draws of one tree are independent: its first two are a uniform pair
    assert_fits(torch.bincount(picks[:, 0] * d + picks[:, 1], minlength=d * d), torch.ones(d * d), "pairs")


WEIGHTS = [1.0, 2.0, 3.0, 0.0, 4.0, 0.5, 6.0]


def test_weighted_with_replacement() -> None:
    trees = 8000
    picks = draws(WEIGHTS, 4, trees, replace=True, seed=30, weighted=True)
    assert_fits(torch.bincount(picks.view(-1), minlength=len(WEIGHTS)), torch.tensor(WEIGHTS), "weighted draws")


def test_weighted_without_replacement_one_pick() -> None:
    picks = draws(WEIGHTS, 1, 30000, seed=31, weighted=True)
    assert_fits(torch.bincount(picks.view(-1), minlength=len(WEIGHTS)), torch.tensor(WEIGHTS), "weighted pick")


def test_weighted_without_replacement_ordered_pairs() -> None:
    """Two picks in the order drawn: (i, j) with probability w_i / W * w_j / (W - w_i)."""
    trees, d, W = 40000, len(WEIGHTS), sum(WEIGHTS)
    picks = draws(WEIGHTS, 2, trees, seed=32, weighted=True)
    probs = torch.zeros(d * d, dtype=torch.float64)
    for i, j in permutations(range(d), 2):
        probs[i * d + j] = WEIGHTS[i] / W * WEIGHTS[j] / (W - WEIGHTS[i])
    assert_fits(torch.bincount(picks[:, 0] * d + picks[:, 1], minlength=d * d), probs, "weighted ordered pairs")


def test_weighted_zero_weights_come_last() -> None:
    """Fewer positive weights than picks: every positive one, then zero-weight ones, distinct."""
    weights = [0.0, 1.0, 0.0, 2.0, 0.0]
    picks = draws(weights, 3, 500, seed=33, weighted=True)
    for row in picks.tolist():
        assert set(row[:2]) == {1, 3} and row[2] in (0, 2, 4), row


@pytest.mark.parametrize("replace", [False, True])
def test_weighted_nodes_without_candidates_give_nothing(replace: bool) -> None:
    """A frontier node without edges, or a fanout of 0, picks nothing, weighted
    too (only a window with edges, all of weight 0, is an error with
    replacement)."""
    rowptr, col, w = torch.tensor([0, 1, 1, 2]), torch.tensor([1, 0]), torch.tensor([0.5, 0.5])
    two = 2 if replace else 1  # node 0's one edge drawn twice, or taken whole
    for seed, fanout, edges in (([0, 1], [2], [two]), ([1], [3], [0]), ([0], [0], [0]), ([2, 1], [1, 2], [1, two])):
        out = torchplug.neighbor_sample(rowptr, col, torch.tensor(seed), fanout, edge_weight=w, replace=replace)
        assert out[5] == edges, (seed, fanout, out[5])


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("k", [5, 8, -1])
def test_fanout_past_the_degree_takes_every_neighbour_in_order(k: int, weighted: bool) -> None:
    """k >= degree (or -1) without replacement: the whole neighbourhood in
    order, zero-weight edges included; with replacement k draws (-1: whole)."""
    weights = [0.0, 1.0, 2.0, 0.0, 3.0]
    rowptr, col = star(weights)
    w = torch.tensor(weights) if weighted else None
    out = sample(rowptr, col, torch.zeros(50, dtype=L), [k], "cpu", 34, disjoint=True, edge_weight=w)
    assert out[3].view(50, 5).tolist() == [list(range(5))] * 50
    out = sample(rowptr, col, torch.zeros(50, dtype=L), [k], "cpu", 35, disjoint=True, edge_weight=w, replace=True)
    if k == -1:
        assert out[3].view(50, 5).tolist() == [list(range(5))] * 50
    else:
        picks = picks_of(out, 50, k)
        assert ((picks >= 0) & (picks < 5)).all()
        if weighted:
            assert not ((picks == 0) | (picks == 3)).any(), "a zero-weight edge drawn"


# ---- temporal ----------------------------------------------------------------------------

# 0 (time 5) -> 1 (time 1), 3 (time 6); 1 -> 2 (time 3), 4 (time 5), 3: each
# neighbourhood sorted by time.
CHAIN = (torch.tensor([0, 2, 5, 5, 5, 5]), torch.tensor([1, 3, 2, 4, 3]), torch.tensor([5, 1, 3, 6, 5]))


@pytest.mark.parametrize("seed_time, nodes", [(None, [0, 1, 2, 4]), (2, [0, 1]), (0, [0]), (10, [0, 1, 3, 2, 4])])
def test_node_time_cuts_at_the_roots_time(seed_time: Optional[int], nodes: list, device: str) -> None:
    """Every hop keeps the edges to nodes not later than the tree's root
    (equal times pass), not its own node's time: node 1 (time 1) reaches 2
    and 4 under a root of time 5."""
    needs(device, "neighbor_sample")
    rowptr, col, node_time = CHAIN
    kw = dict(node_time=node_time, disjoint=True)
    if seed_time is not None:
        kw["seed_time"] = torch.tensor([seed_time])
    for strategy in ("uniform", "last"):
        out = sample(rowptr, col, torch.tensor([0]), [-1, -1], device, temporal_strategy=strategy, **kw)
        assert out[2][:, 1].tolist() == nodes, (seed_time, strategy)
        assert_same_sample(out, neighbor_sample_reference(rowptr, col, torch.tensor([0]), [-1, -1],
                                                          temporal_strategy=strategy, **kw))


def test_edge_time_cuts_at_the_seed_time(device: str) -> None:
    """Edge times against each tree's seed_time, in every hop."""
    needs(device, "neighbor_sample")
    rowptr, col, _ = CHAIN
    edge_time = torch.tensor([2, 4, 1, 3, 5])
    for t, edges in [(3, [0, 2, 3]), (4, [0, 1, 2, 3]), (1, []), (5, [0, 1, 2, 3, 4])]:
        out = sample(rowptr, col, torch.tensor([0]), [-1, -1], device, edge_time=edge_time,
                     seed_time=torch.tensor([t]), disjoint=True)
        assert out[3].tolist() == edges, t


def test_temporal_last_takes_the_latest() -> None:
    """'last': the latest `count` edges of the window (count >= the window: all
    of it), in order; every tree its own root time."""
    rowptr, col = star(8)  # 0 -> 1..8, node i at time i
    node_time = torch.arange(9)
    seed_time = torch.arange(-1, 10)
    trees = seed_time.numel()
    for count in (0, 1, 3, 20):
        out = sample(rowptr, col, torch.zeros(trees, dtype=L), [count], "cpu", count, node_time=node_time,
                     seed_time=seed_time, disjoint=True, temporal_strategy="last")
        edge_id, tree = out[3], out[2][out[0], 0]
        for b, t in enumerate(seed_time.tolist()):
            window = list(range(0, min(max(t, 0), 8)))  # edge e leads to node e + 1 at time e + 1
            assert edge_id[tree == b].tolist() == window[max(0, len(window) - count):], (count, t)
    # with replacement: `count` draws, from the latest `count` only
    out = sample(rowptr, col, torch.zeros(2000, dtype=L), [3], "cpu", 40, node_time=node_time,
                 seed_time=torch.full((2000,), 6), disjoint=True, temporal_strategy="last", replace=True)
    assert_fits(torch.bincount(picks_of(out, 2000, 3).view(-1), minlength=8), torch.tensor([0.0] * 3 + [1.0] * 3
                                                                                         + [0.0] * 2), "last")


def test_temporal_uniform_draws_from_the_window() -> None:
    rowptr, col = star(8)
    out = sample(rowptr, col, torch.zeros(8000, dtype=L), [1], "cpu", 41, node_time=torch.arange(9),
                 seed_time=torch.full((8000,), 5), disjoint=True)
    assert_fits(torch.bincount(picks_of(out, 8000, 1).view(-1), minlength=8),
                torch.tensor([1.0] * 5 + [0.0] * 3), "uniform in time")


def test_unsorted_neighbourhood_raises() -> None:
    rowptr, col, node_time = CHAIN
    with pytest.raises(RuntimeError, match=r"torchplug::neighbor_sample: argument 'node_time'.*sorted by .*time.*node 0"):
        torchplug.neighbor_sample(rowptr, torch.tensor([3, 1, 2, 4, 3]), torch.tensor([0]), [1],
                                  node_time=node_time, seed_time=torch.tensor([9]), disjoint=True)
    with pytest.raises(RuntimeError, match=r"torchplug::neighbor_sample: argument 'edge_time'.*sorted by .*time.*node 1"):
        torchplug.neighbor_sample(rowptr, col, torch.tensor([0]), [-1, 1], edge_time=torch.tensor([0, 1, 9, 5, 3]),
                                  seed_time=torch.tensor([9]), disjoint=True)


# ---- random walks ------------------------------------------------------------------------

# 0 -> 1, 2; 1 -> 0 (back), 1 (itself), 2 (also 0's), 3 (not 0's), 4 (4 -> 0
# exists, 0 -> 4 does not: not 0's neighbour); 2, 3, 4 -> 0.
NODE2VEC = (torch.tensor([0, 2, 7, 8, 9, 10]), torch.tensor([1, 2, 0, 1, 2, 3, 4, 0, 0, 0]))


@pytest.mark.parametrize("p, q", [(1.0, 1.0), (0.5, 2.0), (2.0, 0.5), (0.25, 0.25), (4.0, 4.0), (1.0, 0.3),
                                  (0.3, 1.0)])
def test_node2vec_step_follows_the_biases(p: float, q: float, device: str) -> None:
    """From t = 0 through v = 1: back to 0 weighs 1/p, to 1 and 2 (0 -> 1
    and 0 -> 2 are edges) 1, to 3 and 4 1/q; the first step is uniform."""
    needs(device, "random_walk")
    rowptr, col = NODE2VEC
    walks = torchplug.random_walk(*to(device, rowptr, col, torch.zeros(60000, dtype=L)), 2, p, q,
                                  generator=gen(int(100 * p + q))).cpu()
    check_random_walk(walks[:500], rowptr, col, torch.zeros(500, dtype=L), 2)
    assert_fits(torch.bincount(walks[:, 1], minlength=5), torch.tensor([0.0, 1, 1, 0, 0]), "first step")
    via = walks[walks[:, 1] == 1, 2]
    weights = torch.tensor(node2vec_weights(rowptr, col, 0, 1, p, q), dtype=torch.float64)
    assert weights.tolist() == pytest.approx([1 / p, 1.0, 1.0, 1 / q, 1 / q])
    assert_fits(torch.bincount(via, minlength=5), weights, f"node2vec p={p} q={q}")


@pytest.mark.parametrize("p, q", [(1.0, 1.0), (0.5, 2.0)])
def test_walk_steps_weigh_repeated_edges(p: float, q: float, device: str) -> None:
    """Uniform steps over a node's edges (an edge twice, twice as likely);
    with p, q the first step is uniform too."""
    needs(device, "random_walk")
    rowptr, col = torch.tensor([0, 4, 5, 6, 7]), torch.tensor([1, 2, 2, 3, 0, 0, 0])
    walks = torchplug.random_walk(*to(device, rowptr, col, torch.zeros(12000, dtype=L)), 1, p, q,
                                  generator=gen(50)).cpu()
    assert_fits(torch.bincount(walks[:, 1], minlength=4), torch.tensor([0.0, 1, 2, 1]), "uniform step")


@pytest.mark.parametrize("p, q", [(1.0, 1.0), (0.5, 2.0), (3.0, 0.2)])
def test_isolated_nodes_keep_the_walk_in_place(p: float, q: float, device: str) -> None:
    needs(device, "random_walk")
    rowptr, col = torch.tensor([0, 1, 1, 3, 3]), torch.tensor([1, 0, 1])  # 0 -> 1; 2 -> 0, 1; 1, 3 none
    walks = torchplug.random_walk(*to(device, rowptr, col, torch.tensor([3, 1, 0, 2])), 5, p, q,
                                  generator=gen(51)).cpu()
    assert walks[:3].tolist() == [[3] * 6, [1] * 6, [0] + [1] * 5]
    assert walks[3, 2:].tolist() == [1] * 4


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("p, q", [(1.0, 1.0), (0.5, 2.0), (2.0, 0.5)])
def test_walks_follow_edges(p: float, q: float, dtype: torch.dtype, device: str) -> None:
    needs(device, "random_walk")
    g = gen(52)
    for k in range(4):
        rowptr, col = random_graph(15, 40, g)
        seed = torch.randint(0, 15, (30,), generator=g)
        args = tuple(t.to(dtype) for t in (rowptr, col, seed))
        walks = torchplug.random_walk(*to(device, *args), 8, p, q, generator=gen(k)).cpu()
        check_random_walk(walks, *args, 8)


def test_walks_without_choice_match_the_reference(device: str) -> None:
    needs(device, "random_walk")
    rowptr, col = one_out_edge_graph(40, gen(53), isolated=5)
    seed = torch.randint(0, 40, (25,), generator=gen(54))
    for p, q in ((1.0, 1.0), (0.5, 4.0)):
        got = torchplug.random_walk(*to(device, rowptr, col, seed), 10, p, q).cpu()
        assert torch.equal(got, walk_reference(rowptr, col, seed, 10))


# ---- reproducibility ---------------------------------------------------------------------


def big_graph() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(rowptr, col, node_time, edge_weight): 3000 nodes, 30,000 edges, each
    neighbourhood sorted by node time."""
    g = gen(60)
    rowptr, col = random_graph(3000, 30000, g)
    node_time = torch.randint(0, 50, (3000,), generator=g)
    col = col[sorted_by(rowptr, node_time[col])]
    return rowptr, col, node_time, torch.rand(30000, generator=g)


def at_threads(threads: int, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def assert_identical(a, b, context: str) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), context
        else:
            assert x == y, context


@pytest.mark.parametrize("variant", ["plain", "replace", "weighted", "weighted-replace", "temporal"])
def test_neighbor_sample_same_seed_same_bits_at_any_thread_count(variant: str) -> None:
    rowptr, col, node_time, weight = big_graph()
    options = dict(replace=variant.endswith("replace"))
    if variant.startswith("weighted"):
        options["edge_weight"] = weight
    if variant == "temporal":
        options.update(node_time=node_time, disjoint=True, seed_time=torch.randint(20, 50, (1500,), generator=gen(64)))
    seed = torch.randperm(3000, generator=gen(61))[:1500]

    def run(s: int = 9):
        return torchplug.neighbor_sample(rowptr, col, seed, [6, 4], generator=gen(s), **options)

    first = at_threads(1, run)
    assert sum(first[5]) > 10000
    for threads in (1, 2, 8):
        assert_identical(at_threads(threads, run), first, f"{threads} threads")
    assert not torch.equal(at_threads(2, lambda: run(10))[3], first[3]), "another seed, the same picks"


@pytest.mark.parametrize("p, q", [(1.0, 1.0), (0.5, 2.0)])
def test_random_walk_same_seed_same_bits_at_any_thread_count(p: float, q: float) -> None:
    rowptr, col, _, _ = big_graph()
    seed = torch.randint(0, 3000, (3000,), generator=gen(62))

    def run(s: int = 9):
        return torchplug.random_walk(rowptr, col, seed, 12, p, q, generator=gen(s))

    first = at_threads(1, run)
    for threads in (1, 2, 8):
        assert torch.equal(at_threads(threads, run), first), f"{threads} threads"
    assert not torch.equal(run(10), first)


def test_default_generator_follows_manual_seed() -> None:
    """generator=None draws from the default generator: torch.manual_seed(s)
    gives the same result as a generator seeded s, every time."""
    rowptr, col, _, _ = big_graph()
    seed = torch.randperm(3000, generator=gen(63))[:200]
    with torch.random.fork_rng():
        results = []
        for _ in range(2):
            torch.manual_seed(5)
            results.append((torchplug.neighbor_sample(rowptr, col, seed, [5, 5]),
                            torchplug.random_walk(rowptr, col, seed, 6, 0.5, 2.0)))
        torch.manual_seed(6)
        other = torchplug.neighbor_sample(rowptr, col, seed, [5, 5])
    g = gen(5)  # both calls draw from it, as they did from the default generator
    explicit = (torchplug.neighbor_sample(rowptr, col, seed, [5, 5], generator=g),
                torchplug.random_walk(rowptr, col, seed, 6, 0.5, 2.0, generator=g))
    for got in (results[1], explicit):
        assert_identical(got[0], results[0][0], "neighbor_sample")
        assert torch.equal(got[1], results[0][1]), "random_walk"
    assert not torch.equal(other[3], results[0][0][3])


# ---- subgraph ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_subgraph_matches_the_reference(dtype: torch.dtype, device: str) -> None:
    """Random graphs and node sets (in any order), every node, nodes without
    edges, none; without edge ids."""
    needs(device, "subgraph")
    g = gen(70)
    for k in range(8):
        n = int(torch.randint(1, 25, (1,), generator=g))
        rowptr, col = random_graph(n + 3, 3 * n, g, reached=n)  # the last 3 nodes have no edges
        for nodes in (torch.randperm(n + 3, generator=g)[:int(torch.randint(0, n + 4, (1,), generator=g))],
                      torch.randperm(n + 3, generator=g), torch.tensor([n + 2, n]), torch.zeros(0, dtype=L)):
            args = tuple(t.to(dtype) for t in (rowptr, col, nodes))
            got = torchplug.subgraph(*to(device, *args))
            want = subgraph_reference(*args)
            for a, b in zip(got, want):
                assert a.dtype == b.dtype and torch.equal(a.cpu(), b), f"graph {k}, nodes {nodes.tolist()}"
            got = torchplug.subgraph(*to(device, *args), return_edge_id=False)
            assert got[2] is None and torch.equal(got[1].cpu(), want[1])


def test_subgraph_of_pyg_libs_cycle() -> None:
    rowptr = torch.arange(0, 13, 2)
    col = torch.tensor([[(i - 1) % 6, (i + 1) % 6] for i in range(6)]).view(-1)
    out = torchplug.subgraph(rowptr, col, torch.arange(1, 5))
    assert [t.tolist() for t in out] == [[0, 1, 3, 5, 6], [1, 0, 2, 1, 3, 2], [3, 4, 5, 6, 7, 8]]


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_repeated_seeds_keep_their_places(dtype: torch.dtype, device: str) -> None:
    """As pyg-lib: each copy of a repeated seed stays in the node list and is
    expanded; a node reached that is a seed names its first copy."""
    needs(device, "neighbor_sample")
    rowptr, col = (t.to(dtype) for t in (RP, COL))
    seed = torch.tensor([1, 2, 1], dtype=dtype)
    out = torchplug.neighbor_sample(*(t.to(device) for t in (rowptr, col, seed)), [2, -1],
                                    generator=torch.Generator().manual_seed(4))
    out = tuple(t.cpu() if isinstance(t, Tensor) else t for t in out)
    assert out[2][:3].tolist() == [1, 2, 1] and out[4][0] == 3
    assert_replays(out, rowptr, col, seed, [2, -1])
    assert (out[1] != 2).all(), "an edge names the second copy of seed 1"


def test_subgraph_repeated_nodes_raise() -> None:
    rowptr, col = random_graph(5, 10, gen(71))
    with pytest.raises(RuntimeError, match=r"torchplug::subgraph: argument 'nodes' holds node 3 twice"):
        torchplug.subgraph(rowptr, col, torch.tensor([1, 3, 0, 3]))


# ---- empty -------------------------------------------------------------------------------


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_empty_seeds_zero_hops_empty_graphs(dtype: torch.dtype, disjoint: bool, device: str) -> None:
    needs(device, "neighbor_sample", "random_walk")
    rowptr, col = random_graph(8, 20, gen(80))
    none = torch.zeros(0, dtype=dtype)
    empty_graph = (torch.zeros(6, dtype=dtype), none)  # 5 nodes, no edges
    shape = (0, 2) if disjoint else (0,)
    cases = [
        (rowptr.to(dtype), col.to(dtype), none, [3, -1], [0, 0, 0], [0, 0], shape),
        (rowptr.to(dtype), col.to(dtype), torch.tensor([4, 2], dtype=dtype), [], [2], [], (2, 2) if disjoint else (2,)),
        (*empty_graph, torch.tensor([4, 0], dtype=dtype), [2, -1], [2, 0, 0], [0, 0], (2, 2) if disjoint else (2,)),
        (torch.zeros(1, dtype=dtype), none, none, [2], [0, 0], [0], shape),
        (rowptr.to(dtype), col.to(dtype), torch.tensor([1], dtype=dtype), [0, 3], [1, 0, 0], [0, 0],
         (1, 2) if disjoint else (1,)),
    ]
    for rp, c, seed, fanout, nodes, edges, node_shape in cases:
        for replace in (False, True):
            out = sample(rp, c, seed, fanout, device, replace=replace, disjoint=disjoint)
            assert out[2].shape == node_shape and out[2].dtype == dtype, (fanout, out[2])
            assert out[0].numel() == out[1].numel() == out[3].numel() == 0
            assert all(t.dtype == dtype for t in out[:4])
            assert out[4] == nodes and out[5] == edges
            assert (out[2][:, 1] if disjoint else out[2]).tolist() == seed.tolist()
    walks = torchplug.random_walk(*to(device, rowptr.to(dtype), col.to(dtype), none), 4)
    assert walks.shape == (0, 5) and walks.dtype == dtype
    walks = torchplug.random_walk(*to(device, *empty_graph, torch.tensor([3, 1], dtype=dtype)), 4, 0.5, 2.0).cpu()
    assert walks.tolist() == [[3] * 5, [1] * 5]
    walks = torchplug.random_walk(*to(device, rowptr.to(dtype), col.to(dtype), torch.tensor([2, 7], dtype=dtype)), 0)
    assert walks.cpu().tolist() == [[2], [7]]


# ---- errors ------------------------------------------------------------------------------

RP, COL, SEED = torch.tensor([0, 2, 4, 6]), torch.tensor([1, 2, 0, 2, 0, 1]), torch.tensor([0, 1])
NS, RW, SG = "torchplug::neighbor_sample: ", "torchplug::random_walk: ", "torchplug::subgraph: "
T3, T6, T2 = torch.zeros(3, dtype=L), torch.zeros(6, dtype=L), torch.zeros(2, dtype=L)


def ns(rowptr=RP, col=COL, seed=SEED, num_neighbors=(2, 2), **kw):
    return lambda: torchplug.neighbor_sample(rowptr, col, seed, list(num_neighbors), **kw)


def rw(rowptr=RP, col=COL, seed=SEED, walk_length=3, **kw):
    return lambda: torchplug.random_walk(rowptr, col, seed, walk_length, **kw)


def sg(rowptr=RP, col=COL, nodes=SEED):
    return lambda: torchplug.subgraph(rowptr, col, nodes)


# (call, exception, message): every message names the op and the argument.
ERRORS = {
    "rowptr decreasing": (ns(rowptr=torch.tensor([0, 3, 2, 6])), IndexError, NS + r"argument 'rowptr' must .*node 1"),
    "rowptr past E": (ns(rowptr=torch.tensor([0, 2, 4, 7])), IndexError, NS + r"argument 'rowptr' .*E = col"),
    "rowptr negative": (ns(rowptr=torch.tensor([-1, 2, 4, 6])), IndexError, NS + r"argument 'rowptr'"),
    "rowptr 2-D": (ns(rowptr=RP.view(1, 4)), RuntimeError, NS + r"argument 'rowptr' must be 1-D"),
    "rowptr empty": (ns(rowptr=torch.zeros(0, dtype=L)), RuntimeError, NS + r"argument 'rowptr' must be 1-D"),
    "col past N": (ns(col=torch.tensor([1, 2, 0, 3, 0, 1])), IndexError, NS + r"argument 'col' .*edge 3 reads 3"),
    "col negative": (ns(col=torch.tensor([1, -1, 0, 2, 0, 1])), IndexError, NS + r"argument 'col' .*reads -1"),
    "seed past N": (ns(seed=torch.tensor([0, 3])), IndexError, NS + r"argument 'seed' holds the value 3"),
    "seed negative": (ns(seed=torch.tensor([-1])), IndexError, NS + r"argument 'seed' holds the negative value -1"),
    "seed 2-D": (ns(seed=SEED.view(1, 2)), RuntimeError, NS + r"argument 'seed' must be 1-D"),
    "fanout -2": (ns(num_neighbors=(2, -2)), RuntimeError, NS + r"argument 'num_neighbors' holds -2 at hop 1"),
    "col int32": (ns(col=COL.int()), RuntimeError, NS + r"arguments 'rowptr' and 'col' must have the same dtype"),
    "seed int32": (ns(seed=SEED.int()), RuntimeError, NS + r"arguments 'rowptr' and 'seed' must have the same dtype"),
    "float graph": (ns(RP.float(), COL.float(), SEED.float()), RuntimeError, NS + r"argument 'rowptr' has unsupp"),
    "node_time shape": (ns(node_time=torch.zeros(4, dtype=L), disjoint=True), RuntimeError,
                        NS + r"argument 'node_time' of shape \[4\] must be \[3\]"),
    "node_time dtype": (ns(node_time=T3.int(), disjoint=True), RuntimeError,
                        NS + r"argument 'node_time' must be a Long tensor"),
    "edge_time shape": (ns(edge_time=T3, seed_time=T2, disjoint=True), RuntimeError,
                        NS + r"argument 'edge_time' of shape \[3\] must be \[6\]"),
    "edge_time dtype": (ns(edge_time=T6.float(), seed_time=T2, disjoint=True), RuntimeError,
                        NS + r"argument 'edge_time' must be a Long tensor"),
    "seed_time shape": (ns(node_time=T3, seed_time=T3, disjoint=True), RuntimeError,
                        NS + r"argument 'seed_time' of shape \[3\] must be \[2\]"),
    "seed_time dtype": (ns(node_time=T3, seed_time=T2.float(), disjoint=True), RuntimeError,
                        NS + r"argument 'seed_time' must be a Long tensor"),
    "edge_time without seed_time": (ns(edge_time=T6, disjoint=True), RuntimeError,
                                    NS + r"argument 'edge_time' needs 'seed_time'"),
    "seed_time alone": (ns(seed_time=T2, disjoint=True), RuntimeError, NS + r"argument 'seed_time' needs"),
    "node_time and edge_time": (ns(node_time=T3, edge_time=T6, seed_time=T2, disjoint=True), RuntimeError,
                                NS + r"arguments 'node_time' and 'edge_time' exclude each other"),
    "temporal without disjoint": (ns(node_time=T3), RuntimeError, NS + r"temporal sampling \(node_time or "
                                                                       r"edge_time\) needs disjoint=True"),
    "edge_time without disjoint": (ns(edge_time=T6, seed_time=T2), RuntimeError, NS + r".*edge_time.*disjoint"),
    "temporal_strategy": (ns(temporal_strategy="first"), RuntimeError,
                          NS + r"argument 'temporal_strategy' must be \"uniform\" or \"last\", got \"first\""),
    "directed=False disjoint": (ns(directed=False, disjoint=True), RuntimeError, NS + r"directed=False .*disjoint"),
    "edge_weight shape": (ns(edge_weight=torch.ones(5)), RuntimeError, NS + r"argument 'edge_weight' of shape \[5\]"),
    "edge_weight dtype": (ns(edge_weight=T6), RuntimeError, NS + r"argument 'edge_weight' has unsupported dtype"),
    "edge_weight temporal": (ns(edge_weight=torch.ones(6), node_time=T3, disjoint=True), RuntimeError,
                             NS + r"argument 'edge_weight' takes no temporal sampling"),
    "edge_weight all 0": (ns(num_neighbors=(1,), edge_weight=torch.zeros(6), replace=True), RuntimeError,
                          NS + r"argument 'edge_weight' weighs a neighbourhood 0"),
    "walk rowptr decreasing": (rw(rowptr=torch.tensor([0, 3, 2, 6])), IndexError, RW + r"argument 'rowptr'"),
    "walk col past N": (rw(torch.tensor([0, 1, 2]), torch.tensor([1, 5]), torch.tensor([1]), 1), IndexError,
                        RW + r"argument 'col' .*edge 1 reads 5"),
    "walk seed past N": (rw(seed=torch.tensor([3])), IndexError, RW + r"argument 'seed' holds the value 3"),
    "walk col int32": (rw(col=COL.int()), RuntimeError, RW + r"arguments 'rowptr' and 'col' must have the same"),
    "walk seed int32": (rw(seed=SEED.int()), RuntimeError, RW + r"arguments 'rowptr' and 'seed' must have the same"),
    "walk length": (rw(walk_length=-1), RuntimeError, RW + r"argument 'walk_length' must be at least 0, got -1"),
    "p = 0": (rw(p=0.0), RuntimeError, RW + r"arguments 'p' and 'q' must be positive, got p=0"),
    "q < 0": (rw(q=-1.0), RuntimeError, RW + r"arguments 'p' and 'q' must be positive, got p=1 q=-1"),
    "subgraph rowptr": (sg(rowptr=torch.tensor([0, 3, 2, 6])), IndexError, SG + r"argument 'rowptr'"),
    "subgraph col": (sg(col=torch.tensor([1, 2, 0, 3, 0, 1])), IndexError, SG + r"argument 'col'"),
    "subgraph nodes": (sg(nodes=torch.tensor([3])), IndexError, SG + r"argument 'nodes' holds the value 3"),
    "subgraph dtypes": (sg(nodes=SEED.int()), RuntimeError, SG + r"arguments 'rowptr' and 'nodes' must have the"),
}


@pytest.mark.parametrize("name", ERRORS)
def test_bad_input_raises_naming_op_and_argument(name: str) -> None:
    call, error, message = ERRORS[name]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("rowptr", [[0, 2, 4, 5], [1, 2, 4, 6]], ids=["ends-below-E", "starts-past-0"])
def test_rowptr_must_start_at_0_and_end_at_E(rowptr: list) -> None:
    """Every row, the first and the last, is read (whole neighbourhoods)."""
    with pytest.raises(IndexError, match=NS + r"argument 'rowptr'"):
        torchplug.neighbor_sample(torch.tensor(rowptr), COL, torch.tensor([0, 1, 2]), [-1])


# ---- Meta, opcheck, torch.compile --------------------------------------------------------


@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=str)
def test_random_walk_meta(dtype: torch.dtype) -> None:
    """The Meta kernel: [S, walk_length + 1] in the seeds' dtype, and its checks."""
    rowptr, col, seed = (t.to(dtype).to("meta") for t in (RP, COL, torch.zeros(7, dtype=L)))
    walks = torchplug.random_walk(rowptr, col, seed, 4, 0.5, 2.0)
    assert walks.device.type == "meta" and walks.shape == (7, 5) and walks.dtype == dtype
    with pytest.raises(RuntimeError, match=RW + r"arguments 'p' and 'q' must be positive"):
        torchplug.random_walk(rowptr, col, seed, 4, 0.0)
    with pytest.raises(RuntimeError, match=RW + r"arguments 'rowptr' and 'seed' must have the same dtype"):
        torchplug.random_walk(rowptr, col, seed.long() if dtype == torch.int32 else seed.int(), 4)


OPCHECK_UTILS = ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
                 "test_aot_dispatch_dynamic"]


@pytest.mark.parametrize("test_util", OPCHECK_UTILS)
def test_random_walk_opcheck(test_util: str, device: str) -> None:
    """opcheck on walks without a choice (so that every run, eager, fake or
    traced, gives the same walks) and on random ones (the default
    generator), uniform and node2vec. A Generator argument goes through
    schema, autograd-registration and fake-tensor checks only: AOTAutograd
    cannot trace a Generator argument."""
    needs(device, "random_walk")
    op = torch.ops.torchplug.random_walk.default
    rowptr, col = one_out_edge_graph(12, gen(90), isolated=2)
    calls = [(rowptr, col, torch.randint(0, 12, (9,), generator=gen(91)), 5, 1.0, 1.0, None),
             (rowptr.int(), col.int(), torch.arange(12, dtype=torch.int32), 3, 0.5, 2.0, None),
             (*NODE2VEC, torch.zeros(6, dtype=L), 4, 2.0, 0.5, None)]
    if not test_util.startswith("test_aot"):
        calls.append((*NODE2VEC, torch.zeros(6, dtype=L), 4, 2.0, 0.5, gen(92)))
    for rp, c, s, *rest in calls:
        result = opcheck(op, (*to(device, rp, c, s), *rest), test_utils=test_util)
        assert result[test_util] == "SUCCESS", result


@pytest.mark.parametrize("test_util", ["test_schema", "test_autograd_registration"])
@pytest.mark.parametrize("name", ["neighbor_sample", "subgraph"])
def test_opcheck_without_meta(name: str, test_util: str, device: str) -> None:
    """neighbor_sample and subgraph size their results by the values sampled
    and have no Meta kernel, so opcheck's fake-tensor and AOT-dispatch
    checks (which need one) do not apply: the schema (no input mutated or
    aliased) and autograd-registration checks do."""
    needs(device, name)
    rowptr, col = random_graph(10, 30, gen(93))
    seed = torch.tensor([3, 7, 1])
    if name == "neighbor_sample":
        calls = [(rowptr, col, seed, [-1, 2], None, None, None, None, False, False, True, False, "uniform", True,
                  None),
                 (rowptr.int(), col.int(), seed.int(), [2, 2], None, None, None, torch.rand(30), True, True, False,
                  False, "uniform", False, gen(0))]
    else:
        calls = [(rowptr, col, seed, True), (rowptr.int(), col.int(), seed.int(), False)]
    for args in calls:
        args = tuple(a.to(device) if isinstance(a, Tensor) else a for a in args)
        result = opcheck(getattr(torch.ops.torchplug, name).default, args, test_utils=test_util)
        assert result[test_util] == "SUCCESS", result


def test_random_walk_compiles(device: str) -> None:
    """torch.compile(fullgraph=True) of a function around random_walk, with
    dynamic shapes, gives eager's walks (graphs without a choice)."""
    needs(device, "random_walk")
    torch._dynamo.reset()

    def walk_ends(rowptr: Tensor, col: Tensor, seed: Tensor) -> Tensor:
        return torchplug.random_walk(rowptr, col, seed, 4, 0.5, 2.0)[:, -1] * 2

    compiled = torch.compile(walk_ends, backend="aot_eager", fullgraph=True, dynamic=True)
    for n, s in ((12, 5), (20, 9)):
        rowptr, col = one_out_edge_graph(n, gen(n), isolated=2)
        seed = torch.randint(0, n, (s,), generator=gen(s))
        args = to(device, rowptr, col, seed)
        assert torch.equal(compiled(*args), walk_ends(*args))
    torch._dynamo.reset()


# ---- heterogeneous graphs ----------------------------------------------------------------


def test_hetero_with_one_type_is_neighbor_sample() -> None:
    """One node type and one edge type: the same streams, the same sample."""
    rowptr, col = random_graph(30, 150, gen(2))
    seed = torch.tensor([3, 7, 11])
    want = torchplug.neighbor_sample(rowptr, col, seed, [3, 2], generator=gen(9))
    got = torchplug.hetero_neighbor_sample(["v"], [("v", "to", "v")], {"v__to__v": rowptr}, {"v__to__v": col},
                                           {"v": seed}, {"v__to__v": [3, 2]}, generator=gen(9))
    for a, b in zip(want[:4], got[:4]):
        assert torch.equal(a, next(iter(b.values())))
    assert want[4] == got[4]["v"] and want[5] == got[5]["v__to__v"]


@pytest.mark.parametrize("csc", [False, True], ids=["csr", "csc"])
@pytest.mark.parametrize("disjoint", [False, True], ids=["shared", "disjoint"])
def test_hetero_edges_exist_and_counts_add_up(csc: bool, disjoint: bool) -> None:
    """Two node types (a: 20, b: 12), three edge types: every sampled edge of
    each type is its graph's edge with the id returned, nodes are unique per
    (tree,) type, and the counts per hop add up."""
    g = gen(5)
    sizes = {"a": 20, "b": 12}
    edge_types = [("a", "ab", "b"), ("b", "ba", "a"), ("a", "aa", "a")]
    rowptr, col, pairs = {}, {}, {}
    for src, rel, dst in edge_types:
        s, d = torch.randint(0, sizes[src], (60,), generator=g), torch.randint(0, sizes[dst], (60,), generator=g)
        rows, cols = (d, s) if csc else (s, d)  # csc: grouped by destination, listing sources
        order = torch.argsort(rows, stable=True)
        key = f"{src}__{rel}__{dst}"
        n = sizes[dst if csc else src]
        rowptr[key] = torch.cat([torch.zeros(1, dtype=L), torch.bincount(rows, minlength=n).cumsum(0)])
        col[key] = cols[order]
        pairs[key] = (rows[order], cols[order])
    seeds = {"a": torch.tensor([0, 5, 9]), "b": torch.tensor([2])}
    fanouts = {"a__ab__b": [2, 2], "b__ba__a": [3, 1], "a__aa__a": [1, -1]}
    row, col_, node_id, edge_id, nodes, edges = torchplug.hetero_neighbor_sample(
        ["a", "b"], edge_types, rowptr, col, seeds, fanouts, csc=csc, disjoint=disjoint, generator=gen(6))
    for key, (rows, cols) in pairs.items():
        src, _, dst = key.split("__")
        ids = node_id[src][:, 1] if disjoint else node_id[src], node_id[dst][:, 1] if disjoint else node_id[dst]
        if csc:  # row: the sampled source, col: the expanded destination
            assert torch.equal(ids[0][row[key]], cols[edge_id[key]]) and torch.equal(ids[1][col_[key]], rows[edge_id[key]])
        else:
            assert torch.equal(ids[0][row[key]], rows[edge_id[key]]) and torch.equal(ids[1][col_[key]], cols[edge_id[key]])
        assert sum(edges[key]) == edge_id[key].numel()
    for t, n in node_id.items():
        assert sum(nodes[t]) == n.size(0) and nodes[t][0] == seeds[t].numel()
        keys = [tuple(k) for k in n.tolist()] if disjoint else n.tolist()
        assert len(set(keys)) == len(keys), f"a node of type {t} twice"


def test_hetero_types_without_time_sample_uniformly() -> None:
    """Temporal sampling where only some types have a time (as PyG collects
    them): the others' edges are sampled without a time window."""
    out = torchplug.hetero_neighbor_sample(
        ["paper", "author"], [("author", "writes", "paper")], {"author__writes__paper": torch.tensor([0, 2, 3])},
        {"author__writes__paper": torch.tensor([0, 1, 0])}, {"paper": torch.tensor([0, 1])},
        {"author__writes__paper": [-1]}, node_time_dict={"paper": torch.tensor([5, 5])}, csc=True, disjoint=True)
    assert out[5]["author__writes__paper"] == [3]  # every edge of both papers, authors having no time


def test_random_walk_stops_at_a_bad_column() -> None:
    with pytest.raises(IndexError, match=r"torchplug::random_walk: argument 'col'"):
        torchplug.random_walk(torch.tensor([0, 1]), torch.tensor([1 << 40]), torch.tensor([0]), 3)


# ---- a graph in pinned host memory, gather_rows ----------------------------------------


def needs_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


HOST_GRAPH_CASES = {
    "uniform": {},
    "with replacement": {"replace": True},
    "weighted": {"edge_weight": True},
    "disjoint": {"disjoint": True},
    "induced": {"directed": False},
}


def synchronisations(call, capfd: pytest.CaptureFixture) -> int:
    """How many times `call` made the host wait for the GPU (torch's sync
    debug mode): its warnings reach Python's warnings, or, where the op was
    called without Python's warning handler, stderr."""
    message = "called a synchronizing CUDA operation"
    torch.cuda.synchronize()
    capfd.readouterr()
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
    finally:
        torch.cuda.set_sync_debug_mode(before)
    return sum(message in str(w.message) for w in caught) + capfd.readouterr().err.count(message)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_cuda_samples_as_the_cpu(mode: str, replace: bool, cuda_device: str) -> None:
    """The same generator seed gives the CPU's sample bit for bit (the same
    streams and picks, docs/ops.md), and every invariant holds, on small
    random graphs, csr and csc, int32 and int64: for fanouts the kernels size
    by host-side bounds (read back once a batch), with -1 (read back every
    hop), with 0, and past every degree."""
    needs(cuda_device, "neighbor_sample")
    g = gen(200 + MODES.index(mode))
    for k in range(6):
        rowptr, col, seed, options = case(mode, g, INDEX_DTYPES[k % 2])
        for fanout in FANOUTS + [[100, 100]]:  # 100: past every degree of case()'s graphs
            kw = dict(options, csc=bool(k % 3 == 1), replace=replace)
            context = f"graph {k}, {fanout}, {kw}"
            s = 100 * k + len(fanout)
            out = sample(rowptr, col, seed, fanout, cuda_device, s, **kw)
            check_neighbor_sample(out, rowptr, col, seed, fanout, **kw)
            assert_same_sample(out, sample(rowptr, col, seed, fanout, "cpu", s, **kw), context)


def check_sample_at_scale(out, rowptr: Tensor, col: Tensor, seed: Tensor, fanouts: list) -> None:
    """check_neighbor_sample's invariants of a directed sample with
    replacement (not disjoint, csr), vectorised for samples of millions of
    edges: the counts add up, the seeds come first, each node once, every
    edge is the graph's edge its id names, each hop's sources ascend within
    its frontier, its new nodes are numbered as found, and every frontier
    node picks `count` edges (none without edges)."""
    row, dst, node, eid = (t.long() for t in out[:4])
    nodes_per_hop, edges_per_hop = out[4], out[5]
    n, e = node.numel(), eid.numel()
    assert sum(nodes_per_hop) == n and sum(edges_per_hop) == e and row.numel() == dst.numel() == e
    assert len(nodes_per_hop) == len(fanouts) + 1 and torch.equal(node[:seed.numel()], seed.long())
    assert torch.unique(node).numel() == n, "a node twice"
    assert torch.equal(col[eid], node[dst]), "an edge id leads elsewhere"
    assert ((rowptr[node[row]] <= eid) & (eid < rowptr[node[row] + 1])).all(), "an edge outside its source's row"
    start = [sum(nodes_per_hop[:h]) for h in range(len(fanouts) + 2)]
    first_edge = [sum(edges_per_hop[:h]) for h in range(len(fanouts) + 1)]
    degree = rowptr.diff()
    for hop, count in enumerate(fanouts):
        lo, hi, end = start[hop], start[hop + 1], start[hop + 2]
        src, reached = row[first_edge[hop]:first_edge[hop + 1]], dst[first_edge[hop]:first_edge[hop + 1]]
        assert (src.diff() >= 0).all() and ((lo <= src) & (src < hi)).all(), f"hop {hop}: sources"
        picked = torch.bincount(src - lo, minlength=hi - lo)
        assert torch.equal(picked, torch.where(degree[node[lo:hi]] > 0, count, 0)), f"hop {hop}: picks per node"
        assert (reached < end).all(), f"hop {hop}: an edge reaches a later hop"
        new = reached[reached >= hi] - hi
        first = torch.full((end - hi,), new.numel(), dtype=L).scatter_reduce(0, new, torch.arange(new.numel()),
                                                                             "amin")
        assert (first < new.numel()).all() and (first.diff() > 0).all(), f"hop {hop}: new nodes not numbered as found"


def test_cuda_samples_as_the_cpu_past_the_bounded_sizes(cuda_device: str, capfd: pytest.CaptureFixture) -> None:
    """1,024 seeds over 100,000 nodes of about 20 edges, fanouts [64, 64, 2]
    with replacement: the bounds (1,024 x 64 x 64 picks at the second hop
    alone) pass what a batch sizes its buffers for, so each hop reads its
    picks back (three synchronisations more than a batch of no hops); the
    sample is the CPU's and meets the invariants."""
    needs(cuda_device, "neighbor_sample")
    g = gen(210)
    n, fanouts = 100_000, [64, 64, 2]
    rowptr, col = random_graph(n, 20 * n, g)
    seed = torch.randperm(n, generator=g)[:1024]
    out = sample(rowptr, col, seed, fanouts, cuda_device, 211, replace=True)
    check_sample_at_scale(out, rowptr, col, seed, fanouts)
    assert_same_sample(out, sample(rowptr, col, seed, fanouts, "cpu", 211, replace=True))
    graph = to(cuda_device, rowptr, col, seed)
    no_hops = synchronisations(lambda: torchplug.neighbor_sample(*graph, [], generator=gen(211)), capfd)
    batch = synchronisations(lambda: torchplug.neighbor_sample(*graph, fanouts, replace=True, generator=gen(211)),
                             capfd)
    assert batch == no_hops + len(fanouts), f"{batch} synchronisations, {no_hops} without hops"


@pytest.mark.parametrize("options", [{}, {"replace": True}, {"directed": False}, {"disjoint": True},
                                     {"edge_weight": True}], ids=["plain", "replace", "undirected", "disjoint",
                                                                   "weighted"])
def test_cuda_reads_its_sizes_back_once_a_batch(options: dict, cuda_device: str,
                                                capfd: pytest.CaptureFixture) -> None:
    """Fanouts that bound the sizes take the synchronisations of a batch of
    no hops (the checks' and the one read-back), whatever the hops; a -1
    takes one more a hop."""
    needs(cuda_device, "neighbor_sample")
    rowptr, col, _, weight = big_graph()
    seed = torch.randperm(3000, generator=gen(220))[:1024]
    options = dict(options, edge_weight=weight.to(cuda_device) if options.get("edge_weight") else None)
    graph = to(cuda_device, rowptr, col, seed)

    def syncs(fanouts: list) -> int:
        return synchronisations(lambda: torchplug.neighbor_sample(*graph, fanouts, generator=gen(221), **options),
                                capfd)

    no_hops = syncs([])
    assert syncs([15, 10, 5]) == no_hops and syncs([4]) == no_hops
    assert syncs([15, -1, 5]) == no_hops + 3 and syncs([-1]) == no_hops + 1


@pytest.mark.parametrize("fanouts", [[1, 2], [1, -1]], ids=["bounded", "read-back"])
def test_cuda_kernel_errors_raise_at_the_end(fanouts: list, cuda_device: str) -> None:
    """All-zero weights with replacement and an unsorted neighbourhood raise
    the CPU's messages (without the node) once the batch is done, on both
    paths; the batch runs to its end in bounds, and the device stays usable."""
    needs(cuda_device, "neighbor_sample")
    rowptr, col, node_time = to(cuda_device, *CHAIN)
    seed = torch.tensor([0, 1], device=cuda_device)
    weight = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0], device=cuda_device)  # node 0's neighbourhood weighs 0
    with pytest.raises(RuntimeError, match=NS + r"argument 'edge_weight' weighs a neighbourhood 0"):
        torchplug.neighbor_sample(rowptr, col, seed, fanouts, edge_weight=weight, replace=True)
    with pytest.raises(RuntimeError, match=NS + r"argument 'node_time' or 'edge_time'.*sorted by time"):
        torchplug.neighbor_sample(rowptr, col.flip(0), seed[:1], fanouts, node_time=node_time,
                                  seed_time=torch.tensor([9], device=cuda_device), disjoint=True)
    torch.cuda.synchronize()
    out = torchplug.neighbor_sample(rowptr, col, seed, fanouts, edge_weight=weight.flip(0), replace=True)
    assert out[4][0] == 2 and sum(out[5]) == out[3].numel()


@pytest.mark.parametrize("case", HOST_GRAPH_CASES)
@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_host_graph_samples_as_the_device_graph(case: str, dtype: torch.dtype) -> None:
    needs_cuda()
    rowptr, col = random_graph(300, 3000, gen(60))
    rowptr, col = rowptr.to(dtype), col.to(dtype)
    seed = torch.randperm(300, generator=gen(61))[:24].to(dtype).cuda()
    options = dict(HOST_GRAPH_CASES[case])
    weight = torch.randint(0, 5, (3000,), generator=gen(62)).float() if options.pop("edge_weight", False) else None

    def run(place) -> tuple:
        return torchplug.neighbor_sample(place(rowptr), place(col), seed, [5, 3], edge_weight=None if weight is None
                                         else place(weight), generator=gen(63), **options)

    on_device, on_host = run(lambda t: t.cuda()), run(lambda t: t.pin_memory())
    for got, want in zip(on_host, on_device):
        if isinstance(want, Tensor):
            assert got.device == seed.device and torch.equal(got, want), case
        else:
            assert got == want, case


def test_host_graph_walks_and_subgraphs_as_the_device_graph() -> None:
    needs_cuda()
    rowptr, col = random_graph(300, 3000, gen(64))
    start = torch.randint(0, 300, (50,), generator=gen(65)).cuda()
    host, device = (rowptr.pin_memory(), col.pin_memory()), (rowptr.cuda(), col.cuda())
    walks = torchplug.random_walk(*host, start, 8, p=0.5, q=2.0, generator=gen(66))
    assert walks.is_cuda and torch.equal(walks, torchplug.random_walk(*device, start, 8, p=0.5, q=2.0,
                                                                      generator=gen(66)))
    nodes = torch.randperm(300, generator=gen(67))[:40].cuda()
    for got, want in zip(torchplug.subgraph(*host, nodes), torchplug.subgraph(*device, nodes)):
        assert got.is_cuda and torch.equal(got, want)


def test_a_graph_in_pageable_host_memory_raises() -> None:
    needs_cuda()
    rowptr, col = random_graph(20, 60, gen(68))
    with pytest.raises(RuntimeError, match="neighbor_sample: argument 'rowptr' is on cpu and 'seed' on cuda.*pinned"):
        torchplug.neighbor_sample(rowptr, col, torch.tensor([0, 1], device="cuda"), [2])
    with pytest.raises(RuntimeError, match="neighbor_sample: argument 'edge_weight' is on cpu .*pinned"):
        torchplug.neighbor_sample(rowptr.pin_memory(), col.pin_memory(), torch.tensor([0, 1], device="cuda"), [2],
                                  edge_weight=torch.ones(60))


def test_host_graph_without_edges() -> None:
    """An empty tensor has nothing to pin: a host graph without edges still samples."""
    needs_cuda()
    rowptr, col = torch.zeros(5, dtype=L).pin_memory(), torch.zeros(0, dtype=L).pin_memory()
    _, _, node_id, edge_id, nodes, edges = torchplug.neighbor_sample(rowptr, col, torch.tensor([3, 1], device="cuda"),
                                                                     [2, 2])
    assert torch.equal(node_id.cpu(), torch.tensor([3, 1])) and edge_id.numel() == 0 and edges == [0, 0]
    assert torchplug.gather_rows(torch.zeros(5, 0).pin_memory(), torch.tensor([4], device="cuda")).shape == (1, 0)


def test_float32_and_float64_weights_pick_alike() -> None:
    """Weights are read in their own dtype: integers, exact in both, give the same picks."""
    rowptr, col = random_graph(100, 1500, gen(69))
    weight = torch.randint(0, 4, (1500,), generator=gen(70)).double()
    for replace in (False, True):
        single, double = (sample(rowptr, col, torch.arange(30), [4, 2], generator=71, replace=replace,
                                 edge_weight=w) for w in (weight.float(), weight))
        assert_same_sample(single, double)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_gather_rows_is_index_select(dtype: torch.dtype, device: str) -> None:
    if device == "cuda":
        needs_cuda()
    x = (torch.randn(50, 7, 3, generator=gen(72)) * 10).to(dtype)
    index = torch.randint(0, 50, (33,), generator=gen(73))
    places = [x.to(device)] + ([x.pin_memory()] if device == "cuda" else [])
    for source in places:
        got = torchplug.gather_rows(source, index.to(device))
        assert got.device.type == device and torch.equal(got.cpu(), x[index])


def test_gather_rows_out_of_range() -> None:
    x = torch.randn(10, 4)
    with pytest.raises(IndexError, match="gather_rows: argument 'index' holds the value 10"):
        torchplug.gather_rows(x, torch.tensor([3, 10]))
    if not torch.cuda.is_available():
        return
    index = torch.tensor([3, 10, -1, 0], device="cuda")
    for source in (x.cuda(), x.pin_memory()):
        got = torchplug.gather_rows(source, index)  # unchecked: rows outside give zeros
        assert torch.equal(got.cpu(), torch.stack([x[3], torch.zeros(4), torch.zeros(4), x[0]]))
        with torchplug.checked(), pytest.raises(IndexError, match="gather_rows: argument 'index'"):
            torchplug.gather_rows(source, index)


def test_gather_rows_bad_input() -> None:
    with pytest.raises(RuntimeError, match="gather_rows: argument 'index' must be 1-D"):
        torchplug.gather_rows(torch.randn(4, 2), torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(RuntimeError, match="gather_rows: argument 'x' must have at least one dimension"):
        torchplug.gather_rows(torch.tensor(1.0), torch.zeros(1, dtype=torch.long))
    with pytest.raises(RuntimeError, match="gather_rows: argument 'index'"):
        torchplug.gather_rows(torch.randn(4, 2), torch.zeros(1))


def test_more_than_2_31_edges() -> None:
    """A graph of 2^31 + 2^20 edges (int64 offsets) on the GPU: the sampled
    edges are the graph's, their ids past 2^31 where the seeds' rows lie."""
    needs_cuda()
    E = 2**31 + 2**20
    if torch.cuda.mem_get_info()[0] < 12 * E:
        pytest.skip("needs about 26 GB of free GPU memory")
    N, degree = 2**27, 16  # rows of 16 edges, the last row takes the rest
    rowptr = torch.arange(N + 1, device="cuda") * degree
    rowptr[-1] = E
    col = torch.randint(0, N, (E,), device="cuda")
    seed = torch.tensor([0, N // 2, N - 1], device="cuda")
    row, out_col, node_id, edge_id, _, edges = torchplug.neighbor_sample(rowptr, col, seed, [8, 2], generator=gen(80))
    assert edge_id.numel() == sum(edges) and int(edge_id.max()) >= 2**31  # the last seed's row lies past 2^31
    assert torch.equal(node_id[out_col], col[edge_id]) and torch.equal(node_id[row][: edges[0]].cpu(),
                                                                       seed.repeat_interleave(8).cpu())
    del col
