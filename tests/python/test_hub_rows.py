"""Hub rows (core/reduce/cuda/hub_rows.cuh) in every family that reduces
rows: scatter, segment_csr, scatter_softmax and spmm, with rows on both
sides of each hub limit and empty rows between hubs, against float64
references in plain PyTorch, on every device.

On CUDA a row with more sources than the limit is a hub. A wave is the
threads the device holds at once (270,336 on an H100 or H200, 132 x 2048).
The sorted order is cut into blocks of a power of two from 32 to 1024
positions: the smallest that keeps the block items (outer x sources x
column vectors / block) to 8 waves, or, with fewer row items (outer x rows
x column vectors) than a wave, the one that makes them nearest one wave;
32 blocks form a group. The limit is the block, grown to twice the mean row
(at most 1024) from a wave of row items on.
Rows of 33 float32 values are 33 vectors of one. "limit-32", "hub-last"
and "many-rows" have at most 4.7M source items with few rows and 2^25 with
many, even along dim 1 of a [2, E, 33] src: blocks of 32 and groups of 1024
positions in all three, and a limit of 32 (a mean row of about one source
in "many-rows", 2^18 rows).

"limit-32" puts four hubs inside group 0, then a hub of 70,000 starting
inside it and one of 1000 starting inside group 68, where the other ends,
and ending inside group 69; its 71,454 sources of 33 values put scatter past
its atomic-rows limit (2^21 elements), so that it takes the hubs in the
default mode too. In "many-rows" a hub of 2048 starts at position 0 and
ends on a group boundary, one of 1025 starts on one (3072) and ends inside
the next group, where one of 2049 starts, and one of 1050 starts inside
group 9 and ends inside group 10. In "hub-last" a hub of 70,000 starts on
a block boundary inside group 0 (position 160) and runs to the last
position.

The CUDA-only layouts have blocks only CUDA has. "limit-128" has 7 rows
and 1,104,482 sources: blocks and limit of 128 positions, groups of 4096.
A row of 128 stays on one thread, one of 129 starting on a block boundary
is a hub, one of 1,100,000 starts inside block 2 and ends inside group
268, where one of 4097 starts, ending inside group 269. Along dim 1 of a
[2, E, 33] src the blocks are 256. "limit-256" has 8192 rows (one wave of
row items) of 100 sources, 825,441 in all: blocks of 32 (along dim 1 too)
and a limit of 256 (twice the mean row), so rows of 100 and 256, longer
than a block, stay on one thread each. One of 257 starting on a block
boundary is a hub, one of 2048 starts inside block 16 and crosses two
groups, one of 1025 crosses the group boundary at 3072, then hubs of 3000
and 300. In "every-row-a-hub" 2,997 rows of 40 sources, past the limit of
32 like the rows of 5000 and 33 before them, are as many hubs: the hub
index lists every one, and most blocks' first positions lie in one."""

from __future__ import annotations

import contextlib

import pytest
import torch

import torchplug
from op_table import deterministic_algorithms

F = 33
#: (rows, the lengths of the first rows, the length of every other row)
LAYOUTS = {
    "limit-32": (40, [64, 32, 33, 0, 65, 0, 0, 31, 200, 70_000, 1000, 1], 1),
    "many-rows": (2**18, [2048, 1024, 1025, 0, 2049, 0, 0, 1023, 3000, 1050, 1500], 1),
    "hub-last": (7, [64, 0, 32, 33, 31, 0, 70_000], 1),
    "limit-128": (7, [128, 129, 0, 1_100_000, 4097, 127, 1], 1),
    "limit-256": (8192, [256, 257, 0, 2048, 255, 1025, 0, 3000, 300], 100),
    "every-row-a-hub": (3000, [0, 5000, 33], 40),
}
#: Layouts whose blocks only CUDA has: on the CPU they repeat the others.
CUDA_ONLY = {"limit-128", "limit-256"}


def _rows(layout: str, device: str) -> int:
    """The layout's row count; skips a CUDA-only layout on the CPU."""
    if layout in CUDA_ONLY and device == "cpu":
        pytest.skip("its block size is CUDA's")
    return LAYOUTS[layout][0]


def _degrees(layout: str) -> torch.Tensor:
    n, head, rest = LAYOUTS[layout]
    degree = torch.full((n,), rest, dtype=torch.long)
    degree[: len(head)] = torch.tensor(head)
    return degree


def _index(layout: str, order: str, g: torch.Generator) -> torch.Tensor:
    degree = _degrees(layout)
    index = torch.repeat_interleave(torch.arange(degree.numel()), degree)
    return index[torch.randperm(index.numel(), generator=g)] if order == "shuffled" else index


def _values(shape: tuple[int, ...], g: torch.Generator, device: str) -> torch.Tensor:
    """Small integers: every sum below is exact in float32."""
    return torch.randint(-4, 5, shape, generator=g).float().to(device)


def _reduced(src: torch.Tensor, index: torch.Tensor, n: int, reduce: str) -> torch.Tensor:
    """torch_scatter's semantics in float64: an empty row gives 0."""
    wide = src.double()
    out = wide.new_zeros(n, wide.shape[1])
    torch_name = {"sum": "sum", "mean": "mean", "min": "amin", "max": "amax"}[reduce]
    return out.scatter_reduce_(0, index.view(-1, 1).expand_as(wide), wide, torch_name, include_self=False)


def _smallest_positions(src: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """min's and max's arg: the smallest position of each row's sources
    holding its value, E for an empty row."""
    E = src.shape[0]
    holds = src == values[index]
    positions = torch.arange(E, device=src.device).view(-1, 1).expand_as(src)
    candidates = torch.where(holds, positions, E)
    out = torch.full_like(values, E, dtype=torch.long)
    return out.scatter_reduce_(0, index.view(-1, 1).expand_as(src), candidates, "amin")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("order", ["sorted", "shuffled"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
@pytest.mark.parametrize("mode", ["default", "deterministic"])
def test_scatter_hubs(layout: str, order: str, reduce: str, mode: str, device: str) -> None:
    g = torch.Generator().manual_seed(0)
    n = _rows(layout, device)
    index = _index(layout, order, g)
    src = _values((index.numel(), F), g, device)
    index = index.to(device)
    base = _values((n, F), g, device)
    with deterministic_algorithms() if mode == "deterministic" else contextlib.nullcontext():
        got = torchplug.scatter(src, index, 0, dim_size=n, reduce=reduce)
        torch.testing.assert_close(got, _reduced(src, index, n, reduce).float())
        if reduce == "sum":  # into out=
            out = base.clone()
            torchplug.scatter_sum(src, index, 0, out=out)
            torch.testing.assert_close(out, (base.double() + _reduced(src, index, n, "sum")).float())
        if reduce in ("min", "max"):
            values, arg = getattr(torchplug, f"scatter_{reduce}")(src, index, 0, dim_size=n)
            assert torch.equal(arg, _smallest_positions(src, index, values))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("order", ["sorted", "shuffled"])
@pytest.mark.parametrize("reduce", ["sum", "max"])
@pytest.mark.parametrize("mode", ["default", "deterministic"])
def test_scatter_hubs_along_inner_dim(layout: str, order: str, reduce: str, mode: str, device: str) -> None:
    """Two outer indices: each has its own partials."""
    g = torch.Generator().manual_seed(4)
    n = _rows(layout, device)
    index = _index(layout, order, g)
    src = _values((2, index.numel(), F), g, device)
    index = index.to(device)
    with deterministic_algorithms() if mode == "deterministic" else contextlib.nullcontext():
        got = torchplug.scatter(src, index, 1, dim_size=n, reduce=reduce)
        want = torch.stack([_reduced(part, index, n, reduce) for part in src])
        torch.testing.assert_close(got, want.float())
        if reduce == "max":
            values, arg = torchplug.scatter_max(src, index, 1, dim_size=n)
            want_arg = [_smallest_positions(part, index, top) for part, top in zip(src, values)]
            assert torch.equal(arg, torch.stack(want_arg))


@pytest.mark.parametrize("reduce", ["sum", "max"])
@pytest.mark.parametrize("mode", ["default", "deterministic"])
def test_scatter_hubs_leave_out_index_values_outside(reduce: str, mode: str, cuda_device: str) -> None:
    """CUDA leaves index values outside [0, N) out: spread through a shuffled
    index with hubs (fewer sorted positions than sources), the rest reduces
    as without them."""
    g = torch.Generator().manual_seed(7)
    n = LAYOUTS["limit-32"][0]
    index = _index("limit-32", "shuffled", g)
    src = _values((index.numel(), F), g, cuda_device)
    stray = torch.arange(0, index.numel(), 89)
    index[stray] = torch.where(stray % 2 == 0, -1, n)
    kept = (index >= 0) & (index < n)
    want = _reduced(src[kept.to(cuda_device)], index[kept].to(cuda_device), n, reduce)
    with deterministic_algorithms() if mode == "deterministic" else contextlib.nullcontext():
        got = torchplug.scatter(src, index.to(cuda_device), 0, dim_size=n, reduce=reduce)
    torch.testing.assert_close(got, want.float())


@pytest.mark.parametrize("order", ["sorted", "shuffled"])
@pytest.mark.parametrize("mode", ["default", "deterministic"])
def test_scatter_hub_of_negative_zeros_into_out(order: str, mode: str, device: str) -> None:
    """Hubs whose sources are all -0.0, summed into a -0.0 of out=, stay
    -0.0 as in index_add_ (on CUDA their partials start at -0.0, not +0.0)."""
    g = torch.Generator().manual_seed(11)
    n = LAYOUTS["limit-32"][0]
    index = _index("limit-32", order, g)
    src = torch.full((index.numel(), F), -0.0)
    want = torch.full((n, F), -0.0).index_add_(0, index, src)
    out = torch.full((n, F), -0.0, device=device)
    with deterministic_algorithms() if mode == "deterministic" else contextlib.nullcontext():
        torchplug.scatter_sum(src.to(device), index.to(device), 0, out=out)
    assert torch.signbit(want).all()
    assert torch.equal(torch.signbit(out.cpu()), torch.signbit(want))
    assert not out.any()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
def test_segment_csr_hubs(layout: str, reduce: str, device: str) -> None:
    g = torch.Generator().manual_seed(1)
    _rows(layout, device)
    degree = _degrees(layout)
    indptr = torch.cat([degree.new_zeros(1), degree.cumsum(0)]).to(device)
    index = torch.repeat_interleave(torch.arange(degree.numel()), degree).to(device)
    src = _values((index.numel(), F), g, device)
    got = torchplug.segment_csr(src, indptr, reduce=reduce)
    torch.testing.assert_close(got, _reduced(src, index, degree.numel(), reduce).float())
    if reduce in ("min", "max"):
        values, arg = getattr(torchplug, f"segment_{reduce}_csr")(src, indptr)
        assert torch.equal(arg, _smallest_positions(src, index, values))


def _softmax(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """scatter_softmax along dim 0 in float64."""
    exp = (src.double() - _reduced(src, index, n, "max")[index]).exp()
    return exp / _reduced(exp, index, n, "sum")[index]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("order", ["sorted", "shuffled"])
def test_scatter_softmax_hubs(layout: str, order: str, device: str) -> None:
    g = torch.Generator().manual_seed(2)
    n = _rows(layout, device)
    index = _index(layout, order, g)
    src = _values((index.numel(), F), g, device)
    index = index.to(device)
    torch.testing.assert_close(torchplug.scatter_softmax(src, index, 0, dim_size=n), _softmax(src, index, n).float())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_scatter_softmax_hubs_along_inner_dim(layout: str, device: str) -> None:
    g = torch.Generator().manual_seed(5)
    n = _rows(layout, device)
    index = _index(layout, "shuffled", g)
    src = _values((2, index.numel(), F), g, device)
    index = index.to(device)
    want = torch.stack([_softmax(part, index, n) for part in src])
    torch.testing.assert_close(torchplug.scatter_softmax(src, index, 1, dim_size=n), want.float())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
def test_spmm_hubs(layout: str, reduce: str, device: str) -> None:
    g = torch.Generator().manual_seed(3)
    _rows(layout, device)
    degree = _degrees(layout)
    n, nnz = degree.numel(), int(degree.sum())
    rowptr = torch.cat([degree.new_zeros(1), degree.cumsum(0)]).to(device)
    col = torch.randint(0, n, (nnz,), generator=g).to(device)
    value = _values((nnz,), g, device)
    x = _values((n, F), g, device)
    row = torch.repeat_interleave(torch.arange(n), degree).to(device)
    messages = value.view(-1, 1) * x[col]
    got = torchplug.spmm((rowptr, col, value), x, reduce)
    torch.testing.assert_close(got, _reduced(messages, row, n, reduce).float())
    if reduce in ("min", "max"):  # the first edge holding each row's value
        values, arg = getattr(torchplug, f"spmm_{reduce}")(rowptr, col, value, x)
        assert torch.equal(arg, _smallest_positions(messages, row, values))


@pytest.mark.parametrize("layout", ["limit-32", "limit-256", "no-hub"])
def test_hubs_replay_in_a_cuda_graph(layout: str, cuda_device: str) -> None:
    """The row kernels and the hub passes after them are chained launches
    (core::launch_one_wave_chained; programmatic dependent launches from
    Hopper on), also the passes that find no hub and return: captured in a
    CUDA graph they keep their order, and a replay over new values gives
    new results. "no-hub": 1000 graphs of 15 to 35 nodes, a pooling batch."""
    g = torch.Generator().manual_seed(6)
    degree = torch.randint(15, 36, (1000,), generator=g) if layout == "no-hub" else _degrees(layout)
    n = degree.numel()
    indptr = torch.cat([degree.new_zeros(1), degree.cumsum(0)]).to(cuda_device)
    index = torch.repeat_interleave(torch.arange(n), degree).to(cuda_device)
    src = _values((index.numel(), F), g, cuda_device)
    x = _values((n, F), g, cuda_device)

    def step() -> tuple[torch.Tensor, ...]:
        return (
            torchplug.segment_csr(src, indptr, reduce="max"),
            torchplug.scatter_softmax(src, index, 0, dim_size=n),
            torchplug.spmm_sum(indptr, index, None, x),  # row r gathers x at its own index: r, degree[r] times
        )

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the first calls (allocations, module loads) outside the capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pooled, soft, summed = step()
    src.copy_(_values(tuple(src.shape), g, cuda_device))
    x.copy_(_values(tuple(x.shape), g, cuda_device))
    graph.replay()
    torch.testing.assert_close(pooled, _reduced(src, index, n, "max").float())
    torch.testing.assert_close(soft, _softmax(src, index, n).float())
    torch.testing.assert_close(summed, x * degree.to(x).view(-1, 1))
