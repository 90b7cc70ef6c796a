"""pytest plugin (``-p backend_on``): PyG's own test suite with torchplug's
PyG backend enabled for the whole session (scripts/pyg_upstream_tests.sh)."""

import torchplug.pyg


def pytest_configure(config) -> None:
    torchplug.pyg.enable()
