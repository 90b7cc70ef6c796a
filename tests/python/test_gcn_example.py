"""examples/gcn.py as a smoke test: it trains, learns through torchplug's
scatter_sum, is deterministic on CPU, and its layer is the GCN formula."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import List

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gcn.py"
FINAL = re.compile(r"^final: loss=(?P<loss>\S+) acc=(?P<acc>\S+) time=\S+s$", re.MULTILINE)
FIRST_EPOCH = re.compile(r"^epoch +1  loss (?P<loss>\S+)", re.MULTILINE)


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs examples/gcn.py with this interpreter and environment."""
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=900
    )


def final_metrics(stdout: str) -> tuple[float, float]:
    """(loss, acc) from the example's last line."""
    match = FINAL.search(stdout)
    assert match is not None, stdout[-2000:]
    return float(match["loss"]), float(match["acc"])


def load_example() -> ModuleType:
    """Imports examples/gcn.py as a module without running it."""
    spec = importlib.util.spec_from_file_location("gcn_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_karate_trains_to_threshold() -> None:
    result = run_example("--epochs", "100", "--device", "cpu")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    loss, acc = final_metrics(result.stdout)
    assert acc >= 0.8
    first = FIRST_EPOCH.search(result.stdout)
    assert first is not None
    assert loss < 0.5 * float(first["loss"])


def test_synthetic_trains() -> None:
    result = run_example("--synthetic", "2000", "--epochs", "30", "--device", "cpu")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    _, acc = final_metrics(result.stdout)
    assert acc > 0.6  # 4 classes: chance is 0.25


def test_cpu_runs_are_deterministic() -> None:
    def without_time(stdout: str) -> List[str]:
        return [re.sub(r" time=\S+| step \S+ ms", "", line) for line in stdout.splitlines()]

    args = ("--epochs", "20", "--device", "cpu", "--seed")
    first, second, other = run_example(*args, "3"), run_example(*args, "3"), run_example(*args, "4")
    assert first.returncode == second.returncode == other.returncode == 0
    assert without_time(first.stdout) == without_time(second.stdout)
    assert without_time(first.stdout) != without_time(other.stdout)


def test_layer_matches_dense_formula_and_gradients_flow(device: str) -> None:
    gcn = load_example()
    graph = gcn.karate_club(device)
    n = graph.num_nodes
    torch.manual_seed(0)
    conv = gcn.GCNConv(n, 5).to(device)
    with torch.no_grad():
        conv.bias.normal_()
    x = torch.randn(n, n, device=device)

    adjacency = torch.eye(n, device=device)
    adjacency[graph.edge_index[1], graph.edge_index[0]] = 1.0
    inv_sqrt_deg = adjacency.sum(1).rsqrt()
    expected = inv_sqrt_deg[:, None] * adjacency * inv_sqrt_deg[None, :] @ conv.lin(x) + conv.bias

    out = conv(x, gcn.normalized_adjacency(graph.edge_index, n))
    torch.testing.assert_close(out, expected)

    # Every parameter of the two-layer model gets a gradient through scatter_sum.
    model = gcn.GCN(n, 16, 2).to(device)
    logits = model(x, gcn.normalized_adjacency(graph.edge_index, n))
    torch.nn.functional.cross_entropy(logits, graph.y).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert bool(parameter.grad.isfinite().all()) and bool(parameter.grad.abs().sum() > 0), name


def test_karate_below_threshold_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gcn = load_example()
    monkeypatch.setattr(gcn, "MIN_KARATE_ACC", 1.01)
    assert gcn.main(["--epochs", "2", "--device", "cpu"]) == 1
    assert "below the sanity threshold" in capsys.readouterr().err
