"""examples/sage.py as a smoke test: it trains with mean and max aggregation
on the karate club (its exit status checks the accuracy) and on a small
synthetic graph, on every device, and its layer is the GraphSAGE formula."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FINAL = re.compile(r"^final: loss=(?P<loss>\S+) acc=(?P<acc>\S+) time=\S+s$", re.MULTILINE)


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / "sage.py"), *args], capture_output=True, text=True,
                          timeout=900)


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_trains_on_karate(aggr: str, device: str) -> None:
    result = run_example("--device", device, "--aggr", aggr)
    assert result.returncode == 0, result.stderr[-2000:]
    match = FINAL.search(result.stdout)
    assert match is not None and float(match["acc"]) >= 0.8, result.stdout[-2000:]
    assert re.search(r"^epoch +1 .* step \S+ ms$", result.stdout, re.MULTILINE), result.stdout[:500]


def test_trains_on_synthetic(device: str) -> None:
    result = run_example("--device", device, "--synthetic", "2000", "--epochs", "40", "--aggr", "max")
    assert result.returncode == 0, result.stderr[-2000:]
    match = FINAL.search(result.stdout)
    assert match is not None and float(match["acc"]) > 0.5, result.stdout[-2000:]


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_layer_is_the_sage_formula(aggr: str, device: str) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import sage
    finally:
        sys.path.remove(str(EXAMPLES))
    torch.manual_seed(0)
    edge_index = torch.randint(0, 20, (2, 80), device=device)
    conv = sage.SAGEConv(5, 4, aggr).to(device)
    x = torch.randn(20, 5, device=device)
    rows = []
    for node in range(20):
        neighbours = x[edge_index[0][edge_index[1] == node]]
        if neighbours.numel() == 0:
            rows.append(torch.zeros(5, device=device))
        else:
            rows.append(neighbours.mean(0) if aggr == "mean" else neighbours.amax(0))
    want = conv.lin_l(torch.stack(rows)) + conv.lin_r(x)
    torch.testing.assert_close(conv(x, sage.neighbours(edge_index, 20)), want)
