"""torchplug.pyg: what it replaces and restores, PyG's functions on it
against PyG's own, the CSR cache, bad input, torch.compile and deterministic
mode. The layers themselves: test_pyg_layers.py."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest
import torch

pyg = pytest.importorskip("torch_geometric")

import torchplug  # noqa: E402
import torchplug.pyg  # noqa: E402
import torch_geometric.edge_index  # noqa: E402
import torch_geometric.utils._scatter  # noqa: E402
from torch_geometric import EdgeIndex  # noqa: E402
from torch_geometric import nn as gnn  # noqa: E402
from torch_geometric import utils  # noqa: E402
from torchplug.pyg.csr_cache import CAPACITY, cache  # noqa: E402


@pytest.fixture(autouse=True)
def backend_off():
    """Every test starts and ends with the backend off and an empty cache."""
    torchplug.pyg.disable()
    cache.clear()
    yield
    torchplug.pyg.disable()
    cache.clear()


def pyg_globals() -> dict[tuple[str, str], int]:
    """The identity of every global of every loaded PyG module, and of
    MessagePassing's and its subclasses' attributes."""
    state = {(name, attr): id(value) for name, module in list(sys.modules.items())
             if name.startswith("torch_geometric") and module is not None for attr, value in vars(module).items()}
    classes = [gnn.MessagePassing, *gnn.MessagePassing.__subclasses__()]
    state.update({(cls.__qualname__, attr): id(value) for cls in classes for attr, value in vars(cls).items()})
    return state


def test_enable_disable_restores_every_object() -> None:
    gnn.GCNConv(3, 3)  # its propagate is generated now, and wrapped by enable()
    before = pyg_globals()
    originals = [utils.scatter, utils.segment, utils.softmax, utils.spmm]
    torchplug.pyg.enable()
    torchplug.pyg.enable()
    assert torchplug.pyg.is_enabled()
    for module in (utils, sys.modules["torch_geometric.nn.aggr.base"], sys.modules["torch_geometric.nn.pool.glob"],
                   sys.modules["torch_geometric.nn.conv.gcn_conv"], sys.modules["torch_geometric.nn.conv.gat_conv"]):
        for original in originals:
            assert all(value is not original for value in vars(module).values()), module.__name__
    assert hasattr(gnn.GCNConv.propagate, "torchplug_messages")
    gnn.SAGEConv(3, 3)  # a class first built while enabled
    assert hasattr(gnn.SAGEConv.propagate, "torchplug_messages")
    torchplug.pyg.disable()
    torchplug.pyg.disable()
    after = pyg_globals()
    changed = {key for key in before if after.get(key) != before[key]}
    assert not changed
    assert not hasattr(gnn.SAGEConv.propagate, "torchplug_messages")


def test_enabled_restores_the_state_before() -> None:
    with torchplug.pyg.enabled():
        assert torchplug.pyg.is_enabled()
        with torchplug.pyg.enabled(False):
            assert not torchplug.pyg.is_enabled()
        assert torchplug.pyg.is_enabled()
    assert not torchplug.pyg.is_enabled()


def test_without_torch_geometric() -> None:
    code = ("import sys; sys.modules['torch_geometric'] = None\n"
            "import torchplug, torchplug.pyg\n"
            "try:\n    torchplug.pyg.enable()\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ImportError:" in result.stdout and "'torch_geometric'" in result.stdout


def both(fn, *args, **kwargs):
    """``fn`` with the backend off, then on (its module's global looked up each time)."""
    with torchplug.pyg.enabled(False):
        expected = fn()(*args, **kwargs)
    with torchplug.pyg.enabled():
        actual = fn()(*args, **kwargs)
    return actual, expected


@pytest.mark.parametrize("reduce", ["sum", "add", "mean", "min", "max", "amin", "amax", "mul", "any"])
@pytest.mark.parametrize("dim", [0, 1, -2])
def test_scatter(device: str, reduce: str, dim: int) -> None:
    torch.manual_seed(0)
    src = torch.randn(5, 30, 3, device=device) if dim else torch.randn(30, 4, device=device)
    # "any" keeps one source per slot, on CUDA not always the same one: there, one source per slot.
    index = torch.randperm(30, device=device) % 14 if reduce != "any" else torch.randperm(14, device=device)
    if reduce == "any":
        src = src.narrow(dim, 0, 14)
    actual, expected = both(lambda: utils.scatter, src, index, dim % src.dim() if dim >= 0 else dim, 14, reduce)
    torch.testing.assert_close(actual, expected)


def test_scatter_integers_and_argmax(device: str) -> None:
    index = torch.tensor([0, 2, 2, 1, 0], device=device)
    src = torch.tensor([3, 1, 4, 1, 5], device=device)
    for reduce in ["sum", "max", "mean"]:
        actual, expected = both(lambda: utils.scatter, src, index, 0, 4, reduce)
        torch.testing.assert_close(actual, expected)
    values = torch.tensor([0.5, 2.0, 1.0, -1.0, 0.25], device=device)
    actual, expected = both(lambda: torch_geometric.utils._scatter.scatter_argmax, values, index, 0, 3)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
def test_segment(device: str, reduce: str) -> None:
    src = torch.randn(20, 5, device=device, requires_grad=True)
    ptr = torch.tensor([0, 3, 3, 11, 20], device=device)
    actual, expected = both(lambda: utils.segment, src, ptr, reduce)
    torch.testing.assert_close(actual, expected)


def test_softmax_index_and_ptr(device: str) -> None:
    torch.manual_seed(0)
    src = torch.randn(30, 4, device=device)
    index = torch.randint(0, 8, (30,), device=device).sort().values
    ptr = torch.cat([index.new_zeros(1), torch.bincount(index, minlength=9).cumsum(0)])
    actual, expected = both(lambda: utils.softmax, src, index, None, 9)
    torch.testing.assert_close(actual, expected)
    actual, expected = both(lambda: utils.softmax, src, None, ptr)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("layout", [torch.sparse_csr, torch.sparse_csc, torch.sparse_coo], ids=str)
@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
def test_spmm_torch_sparse(device: str, layout: torch.layout, reduce: str) -> None:
    if device == "cuda" and reduce in ("min", "max"):
        dense = torch.rand(9, 7).mul(torch.rand(9, 7) > 0.5)
        expected = utils.spmm(dense.to_sparse_csr(), torch.ones(7, 3), reduce)  # PyG's CPU path as reference
        with torchplug.pyg.enabled():
            actual = utils.spmm(dense.to(device).to_sparse(layout=layout), torch.ones(7, 3, device=device), reduce)
        torch.testing.assert_close(actual.cpu(), expected)
        return
    torch.manual_seed(0)
    dense = torch.rand(9, 7, device=device).mul(torch.rand(9, 7, device=device) > 0.5)
    other = torch.randn(7, 3, device=device)
    actual, expected = both(lambda: utils.spmm, dense.to_sparse(layout=layout), other, reduce)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
@pytest.mark.parametrize("transpose", [False, True])
def test_edge_index_matmul(device: str, reduce: str, transpose: bool) -> None:
    torch.manual_seed(0)
    edges = torch.randint(0, 10, (2, 40), device=device)
    adj = EdgeIndex(edges, sparse_size=(10, 10)).sort_by("col" if transpose else "row")[0]
    other = torch.randn(10, 4, device=device)
    value = torch.rand(40, device=device)
    with torchplug.pyg.enabled():
        actual = adj.matmul(other, value, reduce=reduce, transpose=transpose)
    rows, cols = (adj[1], adj[0]) if transpose else (adj[0], adj[1])
    expected = utils.scatter(other[cols] * value.view(-1, 1), rows, 0, 10, reduce)
    torch.testing.assert_close(actual, expected)


def test_cache_never_serves_a_stale_csr() -> None:
    torch.manual_seed(0)
    conv = gnn.SAGEConv(4, 3, aggr="sum")
    x = torch.randn(10, 4)
    edge_index = torch.randint(0, 10, (2, 30))
    with torchplug.pyg.enabled():
        conv(x, edge_index)
        edge_index[1] = torch.randint(0, 10, (30,))  # in place: a new version
        actual = conv(x, edge_index)
        other = torch.randint(0, 10, (2, 30))  # a new graph of the same size
        actual_other = conv(x, other)
    with torchplug.pyg.enabled(False):
        torch.testing.assert_close(actual, conv(x, edge_index))
        torch.testing.assert_close(actual_other, conv(x, other))
    assert cache.builds == 3


def test_cache_reuses_a_graph_rebuilt_each_step() -> None:
    """GCNConv adds self loops every call, a new tensor of the same graph."""
    conv = gnn.GCNConv(4, 3)
    x, edge_index = torch.randn(10, 4), torch.randint(0, 10, (2, 30))
    with torchplug.pyg.enabled():
        for _ in range(3):
            conv(x, edge_index)
    assert cache.builds == 1


def test_cache_keeps_a_graph_with_and_without_self_loops() -> None:
    """A GAT and a SAGE layer over one edge_index: two CSRs of one tensor,
    each built once; the GAT's is PyG's graph with its self loops replaced."""
    torch.manual_seed(0)
    x = torch.randn(12, 4)
    edge_index = torch.cat([torch.randint(0, 12, (2, 40)), torch.tensor([[3, 5], [3, 5]])], dim=1)
    gat, sage = gnn.GATConv(4, 3, heads=2), gnn.SAGEConv(4, 3)
    with torchplug.pyg.enabled():
        for _ in range(3):
            gat(x, edge_index), sage(x, edge_index)
    assert cache.builds == 2
    csr = cache.get(edge_index, 12, 12, self_loops=12)
    looped, _ = utils.add_self_loops(utils.remove_self_loops(edge_index)[0], num_nodes=12)
    order = torch.argsort(looped[1], stable=True)
    assert torch.equal(csr.col, looped[0, order]) and torch.equal(csr.perm, order)
    assert torch.equal(csr.rowptr, torch.searchsorted(looped[1, order], torch.arange(13)))


def test_cache_is_bounded_over_many_graphs() -> None:
    conv = gnn.GINConv(torch.nn.Identity())
    first = torch.randint(0, 20, (2, 50))
    alive = weakref.ref(first)
    with torchplug.pyg.enabled():
        conv(torch.randn(20, 2), first)
        del first
        for size in range(10_000):
            edge_index = torch.randint(0, 20, (2, 1 + size % 97))
            conv(torch.randn(20, 2), edge_index)
    gc.collect()
    assert len(cache) <= CAPACITY
    assert alive() is None, "an evicted graph's edge_index is still held"


def test_index_past_num_nodes_raises_index_error(device: str) -> None:
    x = torch.randn(10, 4, device=device)
    for edge_index in ([[0, 1, 12], [1, 2, 3]], [[0, 1, 2], [1, 10, 3]], [[0, -1, 2], [1, 2, 3]]):
        edge_index = torch.tensor(edge_index, device=device)
        for conv in (gnn.SAGEConv(4, 3), gnn.GINConv(torch.nn.Identity()), gnn.GraphConv(4, 3, aggr="max")):
            with torchplug.pyg.enabled(), torchplug.checked(), pytest.raises(IndexError, match="edge_index"):
                conv.to(device)(x, edge_index)
    if device == "cpu":  # on CUDA, gcn_norm's own indexing (PyG's, torch's kernel) asserts on the device
        with torchplug.pyg.enabled(), pytest.raises(IndexError):
            gnn.GCNConv(4, 3)(x, torch.tensor([[0, 1, 12], [1, 2, 3]]))


def test_index_past_dim_size_raises_pyg_kind_of_error(device: str) -> None:
    """PyG's scatter raises torch's RuntimeError there; so does the backend's."""
    src = torch.randn(5, 2, device=device)
    index = torch.tensor([0, 1, 4, 0, 2], device=device)
    for reduce in ("sum", "mean", "max"):
        if device == "cpu":  # on CUDA, PyG's own scatter asserts on the device
            with torchplug.pyg.enabled(False), pytest.raises(RuntimeError, match="out of bounds"):
                utils.scatter(src, index, 0, 3, reduce)
        with torchplug.pyg.enabled(), torchplug.checked(), pytest.raises(RuntimeError, match="out of bounds"):
            utils.scatter(src, index, 0, 3, reduce)
    with torchplug.pyg.enabled(), torchplug.checked(), pytest.raises(RuntimeError, match="out of bounds"):
        utils.softmax(src, index, num_nodes=3)


def test_non_long_index_gets_a_clear_message(device: str) -> None:
    src = torch.randn(5, 2, device=device)
    with torchplug.pyg.enabled(), pytest.raises(RuntimeError, match="index.*int64|int64.*index"):
        utils.scatter(src, torch.tensor([0, 1, 1, 0, 2], dtype=torch.float32, device=device), 0, 3, "max")


def test_int32_edge_index_runs_fused() -> None:
    torch.manual_seed(0)
    conv = gnn.SAGEConv(4, 3)
    x, edge_index = torch.randn(10, 4), torch.randint(0, 10, (2, 30))
    with torchplug.pyg.enabled():
        actual = conv(x, edge_index.int())
    torch.testing.assert_close(actual, conv(x, edge_index))
    assert cache.builds == 1


class TwoLayers(torch.nn.Module):
    def __init__(self, aggr: str = "mean") -> None:
        super().__init__()
        self.conv1 = gnn.GCNConv(8, 16)
        self.conv2 = gnn.SAGEConv(16, 4, aggr=aggr)

    def forward(self, x, edge_index, batch):
        h = self.conv2(self.conv1(x, edge_index).relu(), edge_index)
        return gnn.global_max_pool(h, batch, size=2)


def test_compile_runs_torchplug_ops_without_graph_breaks(device: str) -> None:
    torch.manual_seed(0)
    model = TwoLayers().to(device)
    x = torch.randn(30, 8, device=device)
    edge_index = torch.randint(0, 30, (2, 120), device=device)
    batch = (torch.arange(30, device=device) >= 15).long()
    targets: set[str] = set()

    def recording(gm: torch.fx.GraphModule, example_inputs):
        targets.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    with torchplug.pyg.enabled():
        compiled = torch.compile(model, backend=recording, fullgraph=True)
        actual = compiled(x, edge_index, batch)
    torch.testing.assert_close(actual, model(x, edge_index, batch))
    assert any("torchplug.spmm" in t for t in targets), sorted(targets)
    assert any("torchplug.scatter_max" in t for t in targets), sorted(targets)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("aggr", ["sum", "mean", "min", "max", "mul", "std", "var", "softmax", "powermean",
                                  "mean-max-std"])
def test_training_step_is_bitwise_repeatable_in_deterministic_mode(aggr: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2000, 8, device="cuda")
    edge_index = torch.randint(0, 2000, (2, 20000), device="cuda")
    batch = (torch.arange(2000, device="cuda") >= 1000).long()

    def step() -> list[torch.Tensor]:
        torch.manual_seed(1)
        model = TwoLayers(aggr.split("-") if "-" in aggr else aggr).cuda()
        gat = gnn.GATConv(8, 8, heads=2).cuda()
        loss = model(x, edge_index, batch).sum() + gat(x, edge_index).square().sum()
        loss.backward()
        return [p.grad.clone() for p in [*model.parameters(), *gat.parameters()] if p.grad is not None]

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with torchplug.pyg.enabled():
            first, second = step(), step()
    finally:
        torch.use_deterministic_algorithms(before)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
