"""Each op folder holds its op's whole story: every ops/<family>/ with a
CMakeLists.txt (the folders CMake builds as plugins) contributes op-table rows
for its own ops, bench workloads, and its Python modules to the installed
package. A family with no rows or no workloads fails here."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import torchplug
from op_table import OP_DIRS, ROWS_BY_FOLDER
from torchplug.bench.workloads import Scale
from torchplug.ops import bench_modules

FOLDERS = [pytest.param(folder, id=folder.name) for folder in OP_DIRS]
#: The test side of a folder, which stays out of the package (python/CMakeLists.txt).
TEST_SIDE = ("test_*.py", "*_rows.py", "*_reference.py")
#: The bench's scales: a CPU's (the tests' tiny sizes) and a GPU's.
SCALES = (Scale(False, 4096, 512, 2**12), Scale(True))


def test_the_folders_are_the_builtin_plugins() -> None:
    """The folders found are the plugins the package ships (lib/libtorchplug_<name>.so)."""
    libraries = (Path(torchplug.__file__).parent / "lib").glob("libtorchplug_*.so")
    plugins = {library.name.removeprefix("libtorchplug_").removesuffix(".so") for library in libraries} - {"core"}
    assert {folder.name for folder in OP_DIRS} == plugins


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_folder_has_rows_of_its_own_ops(folder: Path) -> None:
    rows = ROWS_BY_FOLDER[folder.name]
    assert rows, f"ops/{folder.name}/ has no op-table rows (a <name>_rows.py defining ROWS)"
    plugin_of = {info.name: info.plugin for info in torchplug.registry() if info.namespace == "torchplug"}
    for row in rows:
        assert plugin_of.get(row.name) == folder.name, f"row {row.name}: not an op of ops/{folder.name}/"
        if row.inplace:
            assert plugin_of.get(row.inplace) == folder.name, f"row {row.name}: in-place op {row.inplace}"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_folder_has_bench_workloads(folder: Path) -> None:
    """Its *_bench.py modules give workloads at the CPU sizes and the GPU's."""
    modules = [m for m in bench_modules() if m.__name__.split(".")[2] == folder.name]
    assert modules, f"ops/{folder.name}/ has no bench module (a <name>_bench.py defining workloads)"
    for scale in SCALES:
        assert [w for m in modules for w in m.workloads(scale)], f"ops/{folder.name}/: no workloads at {scale}"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_folder_is_installed(folder: Path) -> None:
    """Its Python files but the test side are in the package, as torchplug.ops.<family>."""
    test_side = {path for pattern in TEST_SIDE for path in folder.glob(pattern)}
    modules = sorted(path.stem for path in set(folder.glob("*.py")) - test_side)
    package = Path(importlib.import_module(f"torchplug.ops.{folder.name}").__path__[0])
    assert sorted(path.stem for path in package.glob("*.py")) == modules
