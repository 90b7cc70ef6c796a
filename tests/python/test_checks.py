"""Checked mode's Python API: the switch, the context manager and the
per-device rule (CUDA behaviour itself is in test_cuda_reliability.py)."""

from __future__ import annotations

import pytest
import torch

import torchplug


@pytest.mark.parametrize("outer", [False, True])
@pytest.mark.parametrize("inner", [False, True])
def test_checked_sets_the_mode_and_restores_it(outer: bool, inner: bool) -> None:
    with torchplug.checked(outer):
        assert torchplug.checks_enabled() is outer
        with torchplug.checked(inner):
            assert torchplug.checks_enabled() is inner
        assert torchplug.checks_enabled() is outer
        with pytest.raises(ValueError), torchplug.checked(inner):
            raise ValueError("inside the block")
        assert torchplug.checks_enabled() is outer


@pytest.mark.parametrize("enabled", [False, True])
def test_validates_indices_per_device(enabled: bool) -> None:
    with torchplug.checked(enabled):
        assert torchplug.validates_indices("cpu")
        assert torchplug.validates_indices(torch.device("cpu"))
        assert torchplug.validates_indices("cuda") is enabled
        assert torchplug.validates_indices(torch.device("cuda", 1)) is enabled
