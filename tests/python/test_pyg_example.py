"""examples/pyg_backend.py as a smoke test: every model trains with the
backend off and on, to the same accuracy, on every device."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pyg_backend.py"
LINE = re.compile(r"^(?P<model>\w+) +backend off: step +\S+ ms  acc (?P<off>\S+) \| backend on: step +\S+ ms  "
                  r"acc (?P<on>\S+) \| \S+x$", re.MULTILINE)


def test_trains_every_model_off_and_on(device: str) -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE), "--device", device, "--nodes", "600", "--graphs", "200",
                             "--epochs", "40"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = {m["model"]: m for m in LINE.finditer(result.stdout)}
    assert sorted(lines) == ["gat", "gcn", "gin", "sage"], result.stdout
    for match in lines.values():
        assert abs(float(match["on"]) - float(match["off"])) <= 0.05, result.stdout
