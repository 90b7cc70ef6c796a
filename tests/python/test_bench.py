"""The benchmark harness (python -m torchplug.bench) runs end to end at tiny
sizes, and its correctness guard tells a wrong output from a right one."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchplug
from torchplug.bench.measure import matches

_BASELINES = {"index_add_", "scatter_add_", "scatter_reduce_"}  # sum's
_OTHER_BASELINES = {"index_reduce_", "scatter_reduce_"}  # the other reductions'
if importlib.util.find_spec("torch_scatter") is not None:
    _BASELINES.add("torch_scatter")
    _OTHER_BASELINES.add("torch_scatter")
_RANDOM = {"torchplug", *_BASELINES}
_SORTED = {*_RANDOM, "segment_reduce"}
_ADD = {"torchplug", "torch.add"}
_SEGMENT = {"torchplug", "segment_reduce lengths", "segment_reduce offsets"}
_GATHER = {"torchplug", "index_select", "repeat_interleave"}
if importlib.util.find_spec("torch_scatter") is not None:
    _SEGMENT.add("torch_scatter")
    _GATHER.add("torch_scatter")


def _bench(tmp_path: Path, *args: str) -> tuple[dict, str]:
    """Runs the harness at test sizes on the CPU; returns its JSON and stdout."""
    path = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchplug.bench",
            "--tiny",
            "--quick",
            "--device",
            "cpu",
            "--repeats",
            "2",
            "--json",
            str(path),
            *args,
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(path.read_text()), proc.stdout


_HAS_PYG = importlib.util.find_spec("torch_geometric") is not None


def test_every_workload_and_candidate_runs_and_matches(tmp_path: Path) -> None:
    record, stdout = _bench(tmp_path)
    assert record["device"] == "cpu"
    assert record["torch_version"] == torch.__version__
    assert record["copy_bandwidth"]["bytes_per_s"] > 0
    assert len(record["copy_bandwidth"]["times_ms"]) == 2

    workloads = record["workloads"]
    scatter = [w for w in workloads if w["op"] == "scatter"]
    assert sorted((w["params"]["reduce"], w["params"]["F"], w["params"]["index"]) for w in scatter) == sorted(
        [(r, f, "random") for r in ("sum", "mean", "mul", "min", "max") for f in (1, 16, 64)]
        + [("sum", 16, "sorted"), ("sum", 16, "power-law 2.5")]
    )
    add = [w["name"] for w in workloads if w["op"] == "add"]
    assert len(add) == 11 and "add n=2^12 float32" in add  # contiguous, then the other layouts
    assert {"add [64,1]+[1,64] bfloat16", "add [64,64].t()+[64,64] float32", "add n=2^12 int32+float32"} <= set(add)
    segment = [w["params"] for w in workloads if w["op"] == "segment"]
    assert sorted((p["kind"], p["reduce"], p["F"]) for p in segment) == sorted(
        [("segment_csr", r, f) for r in ("sum", "mean", "max") for f in (16, 64)]
        + [("segment_coo", "sum", 16), ("gather_csr", "sum", 16), ("gather_coo", "sum", 16)]
        + [("segment_csr", "sum", 16)]  # power-law segments
    )
    pool = [w["params"] for w in workloads if w["op"] == "pool"]
    assert sorted(p["reduce"] for p in pool) == ["max", "mean"]
    composite = [w["params"] for w in workloads if w["op"] == "composite"]
    assert sorted((p["kind"], p["F"]) for p in composite) == [("softmax", 8), ("softmax_fwbw", 8), ("softmax_fwbw", 8),
                                                              ("std", 16)]
    spmm = [w["params"] for w in workloads if w["op"] == "spmm"]
    assert sorted(p["reduce"] for p in spmm) == ["max", "mean", "sum", "sum"]

    for workload in workloads:
        names = {c["name"] for c in workload["candidates"]}
        if workload["op"] == "add":
            assert names == _ADD
        elif workload["op"] == "segment":
            params = workload["params"]
            if params["kind"].startswith("gather"):
                assert names == _GATHER
            else:
                assert names == _SEGMENT | {"index_add_" if params["reduce"] == "sum" else "index_reduce_"}
        elif workload["op"] == "spmm":
            sparse_mm = {"torch.sparse.mm"} if workload["params"]["reduce"] == "sum" else set()
            assert names == {"torchplug", "index_select + scatter"} | sparse_mm
        elif workload["op"] == "pool":
            pyg = {"PyG pool", "PyG pool backend on"} if _HAS_PYG else set()
            assert names == {"torchplug", "torchplug segment_coo", "segment_reduce"} | pyg
        elif workload["op"] == "composite":
            softmax = workload["params"]["kind"].startswith("softmax")
            assert names >= {"torchplug", "plain PyTorch"} | ({"torch_geometric softmax"} if softmax and _HAS_PYG else set())
        elif workload["op"] == "scatter":
            if workload["params"]["reduce"] != "sum":
                assert names == {"torchplug", *_OTHER_BASELINES}
            else:
                assert names == (_SORTED if workload["params"]["index"] == "sorted" else _RANDOM)
        else:  # a family this test does not know: torchplug runs, against something
            assert "torchplug" in names and len(names) > 1
        for candidate in workload["candidates"]:
            assert candidate["status"] == "ok", (workload["name"], candidate)
            assert len(candidate["times_ms"]) == 2
            assert candidate["median_ms"] > 0
            assert candidate["copy_bandwidth_fraction"] > 0
            assert (candidate["ratio"] is None) == (candidate["name"] == "torchplug")
            assert candidate["extra_bytes"] is None  # not measured on a CPU
    assert "median ms" in stdout
    assert stdout.count("torchplug ") >= len(workloads)  # one table row each


def test_rounds_time_every_candidate_in_turn_and_report_the_spread(tmp_path: Path) -> None:
    record, stdout = _bench(tmp_path, "--only", "scatter", "--rounds", "2")
    assert record["rounds"] == 2
    assert "ratio range" in stdout and "2 rounds" in stdout
    for workload in record["workloads"]:
        ours = next(c for c in workload["candidates"] if c["name"] == "torchplug")
        for candidate in workload["candidates"]:
            assert candidate["status"] == "ok", (workload["name"], candidate)
            assert len(candidate["times_ms"]) == 4  # 2 timed calls x 2 rounds
            medians = candidate["round_medians_ms"]
            assert len(medians) == 2
            assert candidate["median_ms"] == pytest.approx(sum(medians) / 2)
            if candidate is ours:
                assert candidate["ratio_range"] is None
                continue
            round_ratios = [a / b for a, b in zip(medians, ours["round_medians_ms"], strict=True)]
            low, high = candidate["ratio_range"]
            assert (low, high) == pytest.approx((min(round_ratios), max(round_ratios)))
            # the ratio of two-round medians is a mediant of the rounds' ratios
            assert low * (1 - 1e-9) <= candidate["ratio"] <= high * (1 + 1e-9)


def test_one_round_keeps_the_table_without_a_range(tmp_path: Path) -> None:
    record, stdout = _bench(tmp_path, "--only", "add")
    assert record["rounds"] == 1
    assert "ratio range" not in stdout
    for candidate in record["workloads"][0]["candidates"]:
        assert len(candidate["round_medians_ms"]) == 1
        assert candidate["median_ms"] == candidate["round_medians_ms"][0]
        if candidate["name"] != "torchplug":
            assert candidate["ratio_range"][0] == pytest.approx(candidate["ratio"])


def test_only_filters_workloads(tmp_path: Path) -> None:
    record, _ = _bench(tmp_path, "--only", "add")
    assert {w["op"] for w in record["workloads"]} == {"add"}


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _bench(tmp_path, "--only", "add", "--plot", str(tmp_path / "bench.png"))
    assert (tmp_path / "bench.png").read_bytes().startswith(b"\x89PNG")


def test_guard_rejects_a_wrong_output_and_accepts_a_reordered_sum() -> None:
    torch.manual_seed(0)
    src, index = torch.randn(4000, 8), torch.randint(0, 100, (4000,))
    reference = torch.zeros(100, 8).index_add_(0, index, src)
    terms = 40.0
    assert matches(torchplug.scatter_sum(src, index, dim=0, dim_size=100), reference, terms)

    perm = torch.randperm(4000)
    reordered = torch.zeros(100, 8).index_add_(0, index[perm], src[perm])
    assert matches(reordered, reference, terms)

    wrong = reference.clone()
    wrong[3, 5] += 0.5
    assert not matches(wrong, reference, terms)
    assert not matches(reference[:99], reference, terms)
    assert not matches(reference.double(), reference, terms)


@pytest.mark.parametrize("before", [False, True])
def test_checked_candidate_turns_checks_on_and_restores_them(before: bool) -> None:
    from torchplug.bench.candidates import checked as _checked

    def boom() -> torch.Tensor:
        raise ValueError("boom")

    with torchplug.checked(before):
        seen = _checked(lambda: torch.tensor(torchplug.checks_enabled()))()
        assert bool(seen) and torchplug.checks_enabled() == before
        with pytest.raises(ValueError):
            _checked(boom)()
        assert torchplug.checks_enabled() == before


def _scatter_lineup_names(device: str) -> list[str]:
    from torchplug.bench.candidates import lineup
    from torchplug.ops.scatter.scatter_bench import ScatterWorkload

    return [c.name for c in lineup(ScatterWorkload(1000, 4, 50), torch.device(device)).candidates]


def test_cpu_lineup_has_no_checked_candidate() -> None:
    from torchplug.bench.candidates import CHECKED

    assert CHECKED not in _scatter_lineup_names("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="checked candidate is CUDA only")
def test_cuda_lineup_has_the_checked_candidate() -> None:
    from torchplug.bench.candidates import CHECKED, TORCHPLUG

    assert _scatter_lineup_names("cuda")[:2] == [TORCHPLUG, CHECKED]


def test_compare_checks_outputs_and_reports_speedups(capsys: pytest.CaptureFixture[str]) -> None:
    from torchplug.bench import compare

    x = torch.randn(1000, 16)
    index = torch.randint(0, 50, (1000,))
    rows = compare(
        {
            "scatter_sum": lambda: torchplug.scatter_sum(x, index, 0, dim_size=50),
            "wrong": lambda: torch.zeros(50, 16),
            "index_add_": lambda: torch.zeros(50, 16).index_add_(0, index, x),
        },
        warmup=1,
        repeats=3,
        terms_per_output=20,
    )
    assert [(r.name, r.matches) for r in rows] == [("scatter_sum", True), ("wrong", False), ("index_add_", True)]
    assert rows[-1].speedup == 1.0 and all(r.median_ms > 0 for r in rows)
    table = capsys.readouterr().out
    assert "vs index_add_" in table and "WRONG" in table
