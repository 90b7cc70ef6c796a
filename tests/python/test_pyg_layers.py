"""PyG's layers, aggregations and readouts with the backend on against off.

Each case builds an unchanged PyG module, runs it with torchplug.pyg off
(PyG's own kernels, the reference) and on, from the same parameters and
inputs, and compares the output and the gradients of the input features, of
the edge weights where there are some, and of every parameter.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch

pyg = pytest.importorskip("torch_geometric")

import torchplug.pyg  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch_geometric import nn as gnn  # noqa: E402
from torch_geometric.nn import aggr  # noqa: E402

N, E, F, OUT = 40, 200, 6, 5
DTYPES = [torch.float32, torch.float64]


def graph(device: str, dtype: torch.dtype) -> dict:
    """A random graph with duplicate edges, nodes without in-edges and two
    batches (for the readouts), and its features."""
    generator = torch.Generator().manual_seed(7)
    edge_index = torch.randint(0, N - 4, (2, E), generator=generator)  # the last 4 nodes: no edges
    batch = (torch.arange(N) >= N // 3).long()
    return {
        "x": torch.randn(N, F, generator=generator, dtype=dtype).to(device).requires_grad_(),
        "edge_index": edge_index.to(device),
        "edge_weight": torch.rand(E, generator=generator, dtype=dtype).add(0.5).to(device).requires_grad_(),
        "edge_attr": torch.randn(E, 3, generator=generator, dtype=dtype).to(device),
        "batch": batch.to(device),
        "ptr": torch.tensor([0, N // 3, N]).to(device),
    }


def mlp(inputs: int, outputs: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(inputs, 8), torch.nn.Tanh(), torch.nn.Linear(8, outputs))


def pna() -> torch.nn.Module:
    degree = torch.tensor([4, 10, 12, 8, 3, 2, 1])
    return gnn.PNAConv(F, OUT, aggregators=["mean", "min", "max", "std"],
                       scalers=["identity", "amplification", "attenuation"], deg=degree, edge_dim=3, towers=1)


# (name, module factory, call) -- the call takes the module and the graph.
CONV = lambda m, g: m(g["x"], g["edge_index"])  # noqa: E731
WEIGHTED = lambda m, g: m(g["x"], g["edge_index"], g["edge_weight"])  # noqa: E731
EDGE_ATTR = lambda m, g: m(g["x"], g["edge_index"], g["edge_attr"])  # noqa: E731
POOL = lambda f: (lambda m, g: f(g["x"], g["batch"]))  # noqa: E731
AGGR_INDEX = lambda m, g: m(g["x"], g["batch"])  # noqa: E731
AGGR_PTR = lambda m, g: m(g["x"], ptr=g["ptr"])  # noqa: E731
BIPARTITE = lambda m, g: m((g["x"], g["x"][: N - 4].flip(1)), g["edge_index"])  # noqa: E731

CASES: list[tuple[str, Callable[[], torch.nn.Module], Callable]] = [
    ("GCNConv", lambda: gnn.GCNConv(F, OUT), CONV),
    ("GCNConv weighted", lambda: gnn.GCNConv(F, OUT), WEIGHTED),
    ("GCNConv cached", lambda: gnn.GCNConv(F, OUT, cached=True), CONV),
    *[(f"SAGEConv {a}", (lambda a=a: gnn.SAGEConv(F, OUT, aggr=a)), CONV)
      for a in ["mean", "sum", "max", "min", "mul", "softmax", "powermean", "std", "var"]],
    ("SAGEConv mean-max-std", lambda: gnn.SAGEConv(F, OUT, aggr=["mean", "max", "std"]), CONV),
    ("GINConv", lambda: gnn.GINConv(mlp(F, OUT), train_eps=True), CONV),
    ("GINEConv", lambda: gnn.GINEConv(mlp(F, OUT), edge_dim=3), EDGE_ATTR),
    ("GraphConv", lambda: gnn.GraphConv(F, OUT), WEIGHTED),
    ("GraphConv max", lambda: gnn.GraphConv(F, OUT, aggr="max"), CONV),
    ("SGConv", lambda: gnn.SGConv(F, OUT, K=2), WEIGHTED),
    ("TAGConv", lambda: gnn.TAGConv(F, OUT, K=2), WEIGHTED),
    ("APPNP", lambda: gnn.APPNP(K=3, alpha=0.1), WEIGHTED),
    ("LGConv", lambda: gnn.LGConv(), CONV),
    ("ClusterGCNConv", lambda: gnn.ClusterGCNConv(F, OUT), CONV),
    ("SimpleConv mean", lambda: gnn.SimpleConv(aggr="mean"), WEIGHTED),
    ("SSGConv", lambda: gnn.SSGConv(F, OUT, alpha=0.1, K=2), CONV),
    ("MFConv", lambda: gnn.MFConv(F, OUT), CONV),
    ("ARMAConv", lambda: gnn.ARMAConv(F, OUT, num_stacks=2, num_layers=2), CONV),
    ("GatedGraphConv", lambda: gnn.GatedGraphConv(F, num_layers=2), CONV),
    ("ChebConv", lambda: gnn.ChebConv(F, OUT, K=3), CONV),
    ("GATConv", lambda: gnn.GATConv(F, OUT, heads=2, dropout=0.0), CONV),
    ("GATConv heads averaged", lambda: gnn.GATConv(F, OUT, heads=3, concat=False), CONV),
    ("GATConv residual no loops", lambda: gnn.GATConv(F, OUT, heads=2, residual=True, add_self_loops=False), CONV),
    ("GATConv bipartite", lambda: gnn.GATConv((F, F), OUT, heads=2, residual=True), BIPARTITE),
    ("GATConv edge_dim", lambda: gnn.GATConv(F, OUT, heads=2, edge_dim=3), EDGE_ATTR),
    ("GATv2Conv", lambda: gnn.GATv2Conv(F, OUT, heads=2, dropout=0.0), CONV),
    ("GATv2Conv shared residual", lambda: gnn.GATv2Conv(F, OUT, heads=2, share_weights=True, residual=True), CONV),
    ("GATv2Conv bipartite", lambda: gnn.GATv2Conv((F, F), OUT, heads=2, concat=False), BIPARTITE),
    ("TransformerConv", lambda: gnn.TransformerConv(F, OUT, heads=2, dropout=0.0), CONV),
    ("TransformerConv beta", lambda: gnn.TransformerConv(F, OUT, heads=2, beta=True), CONV),
    ("TransformerConv averaged", lambda: gnn.TransformerConv(F, OUT, heads=3, concat=False, root_weight=False), CONV),
    ("TransformerConv bipartite", lambda: gnn.TransformerConv((F, F), OUT, heads=2), BIPARTITE),
    ("EdgeConv", lambda: gnn.EdgeConv(mlp(2 * F, OUT), aggr="max"), CONV),
    ("PNAConv", pna, EDGE_ATTR),
    ("GENConv softmax", lambda: gnn.GENConv(F, OUT, aggr="softmax", learn_t=True, edge_dim=3), EDGE_ATTR),
    ("global_add_pool", lambda: torch.nn.Identity(), POOL(gnn.global_add_pool)),
    ("global_mean_pool", lambda: torch.nn.Identity(), POOL(gnn.global_mean_pool)),
    ("global_max_pool", lambda: torch.nn.Identity(), POOL(gnn.global_max_pool)),
    *[(f"{cls.__name__} index", cls, AGGR_INDEX) for cls in (
        aggr.SumAggregation, aggr.MeanAggregation, aggr.MaxAggregation, aggr.MinAggregation, aggr.MulAggregation,
        aggr.StdAggregation, aggr.VarAggregation)],
    ("SoftmaxAggregation", lambda: aggr.SoftmaxAggregation(learn=True), AGGR_INDEX),
    ("PowerMeanAggregation", lambda: aggr.PowerMeanAggregation(learn=True), AGGR_INDEX),
    ("MultiAggregation", lambda: aggr.MultiAggregation(["mean", "max", "std"]), AGGR_INDEX),
    *[(f"{cls.__name__} ptr", cls, AGGR_PTR) for cls in (
        aggr.SumAggregation, aggr.MeanAggregation, aggr.MaxAggregation, aggr.MinAggregation)],
]


class TorchplugCalls(TorchDispatchMode):
    """Records the torchplug ops that run."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "torchplug":
            self.ops.add(func.__name__)
        return func(*args, **(kwargs or {}))


def run(module: torch.nn.Module, call: Callable, g: dict) -> list[torch.Tensor]:
    """The output, then the gradients of x, the edge weights and every
    parameter of a loss that weighs every output element differently."""
    out = call(module, g)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).view_as(out)
    inputs = [g["x"], g["edge_weight"], *module.parameters()]
    grads = torch.autograd.grad((out * weights).sum(), inputs, allow_unused=True)
    return [out.detach(), *(g for g in grads if g is not None)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, factory, call", CASES, ids=[case[0] for case in CASES])
def test_backend_matches_pyg(name: str, factory: Callable, call: Callable, dtype: torch.dtype, device: str) -> None:
    torch.manual_seed(0)
    module = factory().to(device, dtype)
    g = graph(device, dtype)
    with torchplug.pyg.enabled(False):
        expected = run(module, call, g)
    with torchplug.pyg.enabled(), TorchplugCalls() as calls:
        actual = run(module, call, g)
    assert calls.ops, "the backend ran no torchplug op"
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("aggr", ["std", "var", ["mean", "max", "std"], ["sum", "min"]], ids=str)
def test_aggregation_modules_run_over_the_csr(aggr, device: str) -> None:
    """SAGEConv's aggregations of x_j, one module or several, are spmm over
    the CSR: no scatter of gathered messages."""
    torch.manual_seed(0)
    module = gnn.SAGEConv(F, OUT, aggr=aggr).to(device)
    g = graph(device, torch.float32)
    with torchplug.pyg.enabled(), TorchplugCalls() as calls:
        run(module, CONV, g)
    assert calls.ops and all(op.startswith("spmm") or op == "sddmm" for op in calls.ops), calls.ops


@pytest.mark.parametrize("name", ["GCNConv", "SAGEConv mean", "GINConv", "GraphConv", "SGConv", "APPNP"])
def test_default_message_layers_are_fused(name: str) -> None:
    """The layers whose messages are x_j (times a weight) run as one spmm:
    the backend's propagate, not PyG's."""
    with torchplug.pyg.enabled():
        module = dict((case[0], case[1]) for case in CASES)[name]()
        assert hasattr(type(module).propagate, "torchplug_messages")
    assert not hasattr(type(module).propagate, "torchplug_messages")


ATTENTION = [name for name, _, call in CASES
             if name.split()[0] in ("GATConv", "GATv2Conv", "TransformerConv") and call is not EDGE_ATTR]


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_layers_run_edge_attention(name: str, device: str) -> None:
    """The attention layers without edge features run edge_attention and the
    per-head spmm, and none of the scatter ops or the index softmax that
    PyG's own path calls through the backend."""
    factory, call = {case[0]: case[1:] for case in CASES}[name]
    torch.manual_seed(0)
    module = factory().to(device)
    with torchplug.pyg.enabled(), TorchplugCalls() as calls:
        run(module, call, graph(device, torch.float32))
    assert {"edge_attention.default", "spmm_sum.default"} <= calls.ops, calls.ops
    assert not any(op.startswith(("scatter", "softmax.")) for op in calls.ops), calls.ops


def test_attention_dropout_draws_from_the_default_generator(device: str) -> None:
    """In training the routed GATConv drops attention weights: the output
    moves off the eval one, and reseeding repeats it exactly."""
    torch.manual_seed(0)
    module = gnn.GATConv(F, OUT, heads=2, dropout=0.5).to(device)
    g = graph(device, torch.float32)
    with torchplug.pyg.enabled():
        module.eval()
        evaluated = module(g["x"], g["edge_index"])
        module.train()
        torch.manual_seed(3)
        first = module(g["x"], g["edge_index"])
        torch.manual_seed(3)
        second = module(g["x"], g["edge_index"])
    assert torch.equal(first, second)
    assert not torch.allclose(first, evaluated)


def test_attention_weights_requested_run_pyg(device: str) -> None:
    """return_attention_weights asks for PyG's edge-order weights: PyG's
    forward runs, and gives what it gives with the backend off."""
    torch.manual_seed(0)
    module = gnn.GATConv(F, OUT, heads=2).to(device)
    g = graph(device, torch.float32)
    with torchplug.pyg.enabled(False):
        out, (edges, alpha) = module(g["x"], g["edge_index"], return_attention_weights=True)
    with torchplug.pyg.enabled():
        routed_out, (routed_edges, routed_alpha) = module(g["x"], g["edge_index"], return_attention_weights=True)
    torch.testing.assert_close(routed_out, out)
    assert torch.equal(routed_edges, edges)
    torch.testing.assert_close(routed_alpha, alpha)
