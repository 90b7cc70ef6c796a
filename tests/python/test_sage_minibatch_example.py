"""examples/sage_minibatch.py: it trains on mini-batches sampled by
torchplug on every device (on CUDA also from a graph in pinned host
memory), its batches are subgraphs of the graph, and
under torchrun --ddp two gloo ranks keep identical parameters while
visiting every training node once per epoch between them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPT = EXAMPLES / "sage_minibatch.py"
FINAL = re.compile(r"^final: rank=0 acc=(?P<acc>\S+)$", re.MULTILINE)


def test_trains_on_minibatches(device: str) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--device", device, "--nodes", "5000", "--epochs", "2"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    match = FINAL.search(result.stdout)
    assert match is not None and float(match["acc"]) > 0.7, result.stdout[-2000:]
    assert re.search(r"^epoch +1 +loss \S+ +held-out acc \S+ +\d+ steps", result.stdout, re.MULTILINE)


def test_trains_from_a_graph_in_pinned_host_memory() -> None:
    if not torch.cuda.is_available():
        pytest.skip("--host-graph needs a CUDA device")
    result = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda", "--host-graph", "--nodes", "5000",
                             "--epochs", "2"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "in pinned host memory" in result.stdout
    match = FINAL.search(result.stdout)
    assert match is not None and float(match["acc"]) > 0.7, result.stdout[-2000:]


def test_sampled_batch_is_a_subgraph() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import sage_minibatch
    finally:
        sys.path.remove(str(EXAMPLES))
    g = torch.Generator().manual_seed(0)
    src, dst = torch.randint(0, 50, (2, 400), generator=g)
    graph = sage_minibatch.incoming(src, dst, 50)
    seeds = torch.tensor([3, 7, 11])
    node_id, csr = sage_minibatch.sample_batch(graph, seeds, [4, 2], torch.Generator().manual_seed(1))
    assert torch.equal(node_id[:3], seeds)
    targets = torch.repeat_interleave(torch.arange(node_id.numel()), csr.rowptr.diff())
    edges = set(zip(src.tolist(), dst.tolist()))
    assert all((int(node_id[s]), int(node_id[t])) in edges for s, t in zip(csr.col, targets))
    assert csr.rowptr.diff()[:3].max() <= 4


def test_ddp_two_gloo_ranks(tmp_path: Path) -> None:
    # --standalone: a free port, not the default 29500 another job may hold.
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT),
               "--ddp", "--device", "cpu", "--nodes", "3000", "--epochs", "2", "--batch-size", "256",
               "--report", str(tmp_path / "rank{rank}.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    # Both streams: the ranks' prints say how far a rank that died had come.
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["parameters"] == ranks[1]["parameters"], "the ranks' parameters differ"
    train = None
    for epoch in range(2):
        mine = [set(r["visited"][epoch]) for r in ranks]
        assert not mine[0] & mine[1], "a training node was visited by both ranks"
        assert sum(len(r["visited"][epoch]) for r in ranks) == len(mine[0] | mine[1])
        train = train or mine[0] | mine[1]
        assert mine[0] | mine[1] == train, "an epoch missed training nodes"
    assert len(train) == int(0.6 * 3000)
