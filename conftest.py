"""Fixtures shared by every pytest suite in the tree (ops/*/ and tests/python/)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

#: The op folders: every ops/<family>/ with a CMakeLists.txt, as CMake finds them.
OP_DIRS = sorted(p.parent for p in (Path(__file__).resolve().parent / "ops").glob("*/CMakeLists.txt"))
# On the path, so that the suites import each family's op-table rows
# (<family>_rows.py) and references (<family>_reference.py) by name.
sys.path[:0] = [str(folder) for folder in OP_DIRS]

#: Devices the op suites run on: always the CPU, CUDA where a GPU is present.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each device the ops run on ('cpu', and 'cuda' when a GPU is present)."""
    return request.param


@pytest.fixture
def cuda_device() -> str:
    """A CUDA device, for tests that only make sense with a GPU (mixed devices)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return "cuda"


def _assert_same_result(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Two runs of the same computation agree: bit for bit on the CPU (whose
    kernels are deterministic) and for integers; on CUDA floating-point sums
    are added with atomics whose order varies run to run, so there they agree
    to the dtype's default assert_close tolerance."""
    exact = actual.device.type == "cpu" or not actual.dtype.is_floating_point
    if exact:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    else:
        torch.testing.assert_close(actual, expected)


@pytest.fixture
def assert_same_result():
    """The checker for 'same computation, run twice' (see _assert_same_result)."""
    return _assert_same_result


def shard_of(spec: str) -> tuple[int, int]:
    """'i/n' (1 <= i <= n) as (i, n); ValueError naming the variable otherwise."""
    try:
        i, n = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"TORCHPLUG_SHARD must be i/n, got '{spec}'") from None
    if not 1 <= i <= n:
        raise ValueError(f"TORCHPLUG_SHARD must be i/n with 1 <= i <= n, got '{spec}'")
    return i, n


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """TORCHPLUG_SHARD=i/n keeps the i-th of every n collected tests: the
    whole suite in n calls where one call has a time limit
    (scripts/gpu_check.sh). Collection order is fixed, so the shards are
    disjoint and together cover the suite, under pytest-xdist too."""
    spec = os.environ.get("TORCHPLUG_SHARD")
    if not spec:
        return
    i, n = shard_of(spec)
    kept = items[i - 1 :: n]
    config.hook.pytest_deselected(items=[item for k, item in enumerate(items) if k % n != i - 1])
    items[:] = kept
