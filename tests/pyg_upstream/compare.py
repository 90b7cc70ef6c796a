"""Compares two JUnit XML reports of PyG's test suite, backend off and on:
prints the counts of each and every test that passed off but not on, and
exits with status 1 if there is one."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter


def outcomes(path: str) -> dict[str, str]:
    """Each test case's outcome: passed, failed, error or skipped."""
    result = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        result[name] = {"failure": "failed"}.get(kinds[0], kinds[0]) if kinds else "passed"
    return result


def main(off_path: str, on_path: str) -> int:
    off, on = outcomes(off_path), outcomes(on_path)
    for label, report in (("backend off", off), ("backend on", on)):
        print(f"{label}: {len(report)} tests, " + ", ".join(f"{n} {k}" for k, n in sorted(Counter(report.values()).items())))
    regressions = sorted(name for name, outcome in off.items() if outcome == "passed" and on.get(name) != "passed")
    for name in regressions:
        print(f"passes off, not on ({on.get(name, 'missing')}): {name}")
    print(f"{len(regressions)} tests pass with the backend off and not on")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
