"""examples/transformer.py as a smoke test: it trains on the karate club (its
exit status checks the accuracy) and on a small synthetic graph, on every
device, and one layer equals its attention written in plain PyTorch."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FINAL = re.compile(r"^final: loss=(?P<loss>\S+) acc=(?P<acc>\S+) time=\S+s$", re.MULTILINE)


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / "transformer.py"), *args], capture_output=True,
                          text=True, timeout=900)


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


def test_layer_is_scaled_dot_product_attention_per_node() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import transformer
    finally:
        sys.path.remove(str(EXAMPLES))
    torch.manual_seed(0)
    n, heads, width = 20, 3, 4
    edge_index = torch.randint(0, n - 2, (2, 70))  # the last two nodes: no incoming edges
    src, dst = edge_index
    conv = transformer.TransformerConv(5, width, heads).double()
    x = torch.randn(n, 5, dtype=torch.float64)
    q, k, v = (lin(x).view(n, heads, width) for lin in (conv.query, conv.key, conv.value))
    scores = (q[dst] * k[src]).sum(-1) / math.sqrt(width)
    alpha = torch.zeros_like(scores)
    for node in range(n):
        mask = dst == node
        alpha[mask] = scores[mask].softmax(0)
    want = torch.zeros(n, heads, width, dtype=x.dtype).index_add_(0, dst, v[src] * alpha.unsqueeze(-1))
    want = want.flatten(1) + conv.skip(x)
    torch.testing.assert_close(conv(x, transformer.incoming(edge_index, n)), want)
