"""docs/writing-a-plugin.md lists the headers the SDK installs: every one, and
nothing that is not installed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "core" / "include"  # installed whole (core/CMakeLists.txt)


def test_the_guide_lists_every_installed_core_header() -> None:
    guide = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    rows = re.findall(r"^\| `(torchplug/core/[\w./]+)` \|", guide, flags=re.MULTILINE)
    headers = {str(p.relative_to(INCLUDE)) for p in INCLUDE.rglob("*") if p.is_file()}
    folders = {row for row in rows if row.endswith("/")}
    listed = set(rows) - folders
    stale = [row for row in rows if not (INCLUDE / row).exists()]
    assert not stale, f"rows of docs/writing-a-plugin.md naming no installed header: {stale}"
    unlisted = {h for h in headers - listed if not any(h.startswith(folder) for folder in folders)}
    assert not unlisted, f"installed headers without a row in docs/writing-a-plugin.md: {sorted(unlisted)}"
