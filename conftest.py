"""Fixtures shared by every pytest suite in the tree (ops/*/ and tests/python/)."""

from __future__ import annotations

import pytest
import torch

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
