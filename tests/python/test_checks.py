"""Checked mode's Python API: the switch, the context manager and the
per-device rule (CUDA behaviour itself is in test_cuda_reliability.py)."""

from __future__ import annotations

import os
import subprocess
import sys

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


def _in_subprocess(code: str, value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TORCHPLUG_CHECKS"}
    if value is not None:
        env["TORCHPLUG_CHECKS"] = value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "value, expected",
    [(None, False), ("", False), ("1", True), ("0", False), ("true", True), ("false", False),
     ("TRUE", True), ("False", False), ("yes", True), ("no", False), ("On", True), ("OFF", False),
     (" true ", True), ("0 ", False)],
)
def test_environment_variable_is_a_boolean(value, expected: bool) -> None:
    """TORCHPLUG_CHECKS is read as a boolean at import (false used to turn
    checked mode on: any value but empty and 0 did)."""
    result = _in_subprocess("import torchplug; print(torchplug.checks_enabled())", value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(expected)


@pytest.mark.parametrize("value", ["2", "maybe", "enable", "t", "-1", "truee"])
def test_environment_variable_rejects_other_values(value: str) -> None:
    """Anything else fails the import with a ValueError naming the variable
    and the value, not a silent guess."""
    result = _in_subprocess("import torchplug", value)
    assert result.returncode != 0
    assert "ValueError" in result.stderr, result.stderr
    assert "TORCHPLUG_CHECKS" in result.stderr and f"'{value}'" in result.stderr, result.stderr
