"""PyG's samplers on torchplug's.

PyG's ``NeighborSampler`` (behind ``NeighborLoader`` and
``LinkNeighborLoader``), ``Node2Vec`` and ``dropout_path`` call pyg-lib's
ops ``torch.ops.pyg.neighbor_sample``, ``hetero_neighbor_sample`` and
``random_walk`` wherever ``torch_geometric.typing`` says pyg-lib is installed
(PyG builds the sampler's positional arguments from those flags).
:func:`route` points these names at torchplug's functions of the same name,
which take pyg-lib's arguments in pyg-lib's order (plus a trailing
generator) and return its results, and sets the flags, so that these loaders
sample through torchplug with or without pyg-lib, on homogeneous and
heterogeneous graphs. PyG's ``induced`` subgraphs (torch_sparse's) are not
routed.
"""

from __future__ import annotations

import importlib

import torch

from ._patch import Log

#: The flags PyG reads pyg-lib's presence and abilities from, by module.
FLAGS: dict[str, tuple[str, ...]] = {
    "torch_geometric.typing": ("WITH_PYG_LIB", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE", "WITH_WEIGHTED_NEIGHBOR_SAMPLE"),
    "torch_geometric.nn.models.node2vec": ("WITH_PYG_LIB",),  # a copy taken at import
}

#: pyg-lib's ops that torchplug's of the same name stand in for
#: (hetero_neighbor_sample: torchplug's function taking pyg-lib's dictionaries).
OPS = ("neighbor_sample", "random_walk", "hetero_neighbor_sample")


def route(log: Log) -> None:
    """Sets PyG's pyg-lib flags and ``torch.ops.pyg``'s sampler ops, through ``log``."""
    for module_name, names in FLAGS.items():
        module = importlib.import_module(module_name)
        for name in names:
            log.set(module, name, True)
    import torchplug

    for name in OPS:
        log.set(torch.ops.pyg, name, getattr(torchplug, name))
