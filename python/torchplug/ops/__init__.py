"""The op families' Python side, one subpackage per folder of ``ops/``.

The build installs ``ops/<family>/*.py`` here as ``torchplug.ops.<family>``
(python/CMakeLists.txt), all but the test side (``test_*.py``, the op-table
rows ``*_rows.py`` and their ``*_reference.py``). A family's modules hold its
friendly functions, each listing them in ``__all__``, which ``torchplug``
re-exports; its ``*_bench.py`` modules hold its benchmark workloads, which
``python -m torchplug.bench`` runs.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

_HERE = Path(__file__).resolve().parent


def _modules(bench: bool) -> list[ModuleType]:
    """Every family's bench modules, or every other module, by family and name."""
    paths = sorted(_HERE.glob("*/*.py"))
    return [importlib.import_module(f"{__name__}.{path.parent.name}.{path.stem}")
            for path in paths if path.stem.endswith("_bench") == bench]


def family_modules() -> list[ModuleType]:
    """The modules of friendly functions (``ops/<family>/*.py`` but the bench's)."""
    return _modules(bench=False)


def bench_modules() -> list[ModuleType]:
    """The benchmark workloads (``ops/<family>/*_bench.py``)."""
    return _modules(bench=True)
