"""The CSR of an ``edge_index``, built once per graph for the fused layers.

A layer over a plain ``edge_index [2, E]`` needs its edges grouped by target
node: the CSR ``(rowptr, col)`` and ``perm`` (CSR position -> edge, so that
edge weights follow as ``weight[perm]``), and for x's gradient the
transpose (:func:`torchplug.spmm_transpose`). The attention layers ask for
the graph with its self loops replaced by one per node, as PyG's
``remove_self_loops`` and ``add_self_loops`` make it. Sorting the edges costs as much
as a layer's whole forward, so the CSR is kept for the next call with the
same graph.

A lookup first asks for the very tensor of an entry, unchanged since (its
version counter); a new tensor of the same shape on the same device is then
compared with the entries' (``torch.equal``: one pass and one host sync),
because PyG builds a new ``edge_index`` each step in places (GCNConv adds
its self loops every call); a match moves the entry to the new tensor. An entry, one per tensor and sizes, keeps its ``edge_index`` alive, so that
the identity can never belong to a freed tensor's successor; an in-place
change to it (a new version) retires the entry. At most :data:`CAPACITY`
graphs are kept, the least recently used leaving first: training over
thousands of graphs holds a few CSRs at a time.

Under ``torch.compile`` nothing is cached: the CSR is built inside the graph
(every step), whose tracing cannot read version counters or compare data.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from torchplug.checks import validates_indices
from torchplug.ops.spmm import spmm as spmm_ops

#: Graphs kept at once (a model's layers share one; a few for validation sets).
CAPACITY = 8


@dataclass
class Csr:
    """One graph's edges grouped by target: ``rowptr [M + 1]``, ``col [E]``
    (the sources) and ``perm [E]`` (edge ids in CSR order), all int64."""

    rowptr: Tensor
    col: Tensor
    perm: Tensor
    num_cols: int
    _transpose: Optional[tuple[Tensor, Tensor, Tensor]] = field(default=None, repr=False)

    def transpose(self) -> tuple[Tensor, Tensor, Tensor]:
        """:func:`torchplug.spmm_transpose` of this CSR, built on first use."""
        if self._transpose is None:
            self._transpose = spmm_ops.spmm_transpose(self.rowptr, self.col, self.num_cols)
        return self._transpose


def _check_nodes(edge_index: Tensor, num_rows: int, num_cols: int) -> None:
    """The IndexError PyG raises for an ``edge_index`` naming a node outside
    ``x`` or the output, where torchplug validates indices (the CPU, CUDA in
    checked mode); CUDA kernels otherwise skip such edges. A cached graph was
    checked against the same sizes when it was built."""
    if torch.compiler.is_compiling() or not validates_indices(edge_index.device) or edge_index.numel() == 0:
        return
    for row, bound, nodes in ((0, num_cols, "source nodes (x)"), (1, num_rows, "target nodes")):
        low, high = int(edge_index[row].min()), int(edge_index[row].max())
        if low < 0 or high >= bound:
            raise IndexError(f"torchplug.pyg: row {row} of 'edge_index' holds {low if low < 0 else high}, "
                             f"outside the {bound} {nodes}: expected values in [0, {bound})")


def build(edge_index: Tensor, num_rows: int, num_cols: int, self_loops: Optional[int] = None) -> Csr:
    """The CSR of the edges ``edge_index[0, e] -> edge_index[1, e]``,
    ``num_rows`` targets by ``num_cols`` sources, checked as
    :func:`_check_nodes` says; the edges of a row keep their order (a stable
    sort), which makes the result and every sum over it deterministic. With
    ``self_loops`` n, the self loops are dropped and one is appended for each
    of the nodes ``0 .. n-1`` (``perm`` counts edges in that list)."""
    _check_nodes(edge_index, num_rows, num_cols)
    source, target = edge_index[0].long(), edge_index[1].long()
    if self_loops is not None:
        kept = source != target
        loops = torch.arange(self_loops, device=target.device)
        source, target = torch.cat([source[kept], loops]), torch.cat([target[kept], loops])
    order = torch.argsort(target, stable=True)
    bounds = torch.arange(num_rows + 1, device=target.device)
    rowptr = torch.searchsorted(target[order], bounds)
    return Csr(rowptr, source[order], order, num_cols)


@dataclass
class _Entry:
    edge_index: Tensor
    version: int
    key: tuple
    csr: Csr


class CsrCache:
    """The recently used graphs' CSRs (see the module's docstring)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        #: CSRs built so far (lookups that found none).
        self.builds = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forgets every graph (and resets :attr:`builds`)."""
        with self._lock:
            self._entries.clear()
            self.builds = 0

    def get(self, edge_index: Tensor, num_rows: int, num_cols: int, self_loops: Optional[int] = None) -> Csr:
        """The CSR of ``edge_index [2, E]`` (row 0 the sources, row 1 the
        targets) for ``num_rows`` targets and ``num_cols`` sources, with
        ``self_loops`` as :func:`build` says; built if no entry holds it."""
        if torch.compiler.is_compiling():
            return build(edge_index, num_rows, num_cols, self_loops)
        key = (num_rows, num_cols, self_loops)
        with self._lock:
            entry = self._lookup(edge_index, key)
            if entry is None:
                entry = _Entry(edge_index, edge_index._version, key, build(edge_index, num_rows, num_cols, self_loops))
                self.builds += 1
            slot = (id(entry.edge_index), key)
            self._entries[slot] = entry
            self._entries.move_to_end(slot)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            return entry.csr

    def _lookup(self, edge_index: Tensor, key: tuple) -> Optional[_Entry]:
        """The live entry for this graph, retiring stale ones on the way."""
        entry = self._entries.get((id(edge_index), key))
        if entry is not None and entry.edge_index is edge_index:
            if entry.version == edge_index._version:
                return entry
            del self._entries[(id(edge_index), key)]
        for slot, other in list(self._entries.items()):
            if other.version != other.edge_index._version:
                del self._entries[slot]
            elif (other.key == key and other.edge_index.shape == edge_index.shape
                  and other.edge_index.dtype == edge_index.dtype
                  and other.edge_index.device == edge_index.device
                  and torch.equal(other.edge_index, edge_index)):
                del self._entries[slot]  # the graph's entry moves to its newest tensor
                return _Entry(edge_index, edge_index._version, key, other.csr)
        return None


#: The process's cache, shared by every fused layer.
cache = CsrCache()
