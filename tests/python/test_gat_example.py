"""examples/gat.py as a smoke test: it trains on the karate club (its exit
status checks the accuracy) and on a small synthetic graph, on every device,
and its attention is a softmax over each node's incoming edges."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FINAL = re.compile(r"^final: loss=(?P<loss>\S+) acc=(?P<acc>\S+) time=\S+s$", re.MULTILINE)


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / "gat.py"), *args], capture_output=True, text=True,
                          timeout=900)


def test_trains_on_karate(device: str) -> None:
    result = run_example("--device", device)
    assert result.returncode == 0, result.stderr[-2000:]
    match = FINAL.search(result.stdout)
    assert match is not None and float(match["acc"]) >= 0.8, result.stdout[-2000:]
    assert re.search(r"^epoch +1 .* step \S+ ms$", result.stdout, re.MULTILINE), result.stdout[:500]


def test_trains_on_synthetic(device: str) -> None:
    result = run_example("--device", device, "--synthetic", "2000", "--epochs", "40")
    assert result.returncode == 0, result.stderr[-2000:]
    match = FINAL.search(result.stdout)
    assert match is not None and float(match["acc"]) > 0.5, result.stdout[-2000:]


def test_attention_sums_to_one_per_node() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import gat
    finally:
        sys.path.remove(str(EXAMPLES))
    torch.manual_seed(0)
    edge_index = torch.randint(0, 20, (2, 60))
    csr = gat.with_self_loops(edge_index, 20)
    loops = torch.arange(20)
    src, dst = torch.cat([edge_index[0], loops]), torch.cat([edge_index[1], loops])
    conv = gat.GATConv(5, 4, heads=3, dropout=0.0)
    x = torch.randn(20, 5)
    h = conv.lin(x).view(-1, 3, 4)
    scores = torch.nn.functional.leaky_relu((h * conv.att_src).sum(-1)[src] + (h * conv.att_dst).sum(-1)[dst], 0.2)
    alpha = torch.zeros_like(scores)
    for node in range(20):
        mask = dst == node
        alpha[mask] = scores[mask].softmax(0)
    want = torch.zeros(20, 3, 4).index_add_(0, dst, h[src] * alpha.unsqueeze(-1)).flatten(1) + conv.bias
    torch.testing.assert_close(conv(x, csr), want)
