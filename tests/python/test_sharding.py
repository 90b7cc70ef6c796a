"""TORCHPLUG_SHARD=i/n (conftest.py): the shards of a collection are disjoint
and together are the whole collection, as scripts/gpu_check.sh relies on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shard_of

ROOT = Path(__file__).resolve().parents[2]


def _collected(shard: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "TORCHPLUG_SHARD"}
    if shard is not None:
        env["TORCHPLUG_SHARD"] = shard
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "ops/add/test_add.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_shards_partition_the_collection() -> None:
    whole = _collected(None)
    shards = [_collected(f"{i}/3") for i in (1, 2, 3)]
    assert len(whole) > 3
    assert sorted(sum(shards, [])) == sorted(whole)
    assert all(abs(len(shard) - len(whole) / 3) <= 1 for shard in shards)


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b"])
def test_malformed_shard_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="TORCHPLUG_SHARD must be i/n"):
        shard_of(spec)
