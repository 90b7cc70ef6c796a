"""The graph container shared by the built-in datasets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch import Tensor


@dataclass
class Graph:
    """A node-classification graph.

    Attributes:
        edge_index: ``[2, E]`` int64; column ``k`` is the directed edge
            ``edge_index[0, k] -> edge_index[1, k]``. Undirected graphs list
            both directions. No self loops.
        y: ``[num_nodes]`` int64 class label of every node.
        num_nodes: number of nodes ``N``; node ids are ``0 .. N - 1``.
        x: ``[num_nodes, F]`` float32 node features, or ``None`` when the
            dataset has none (use one-hot node ids then).
    """

    edge_index: Tensor
    y: Tensor
    num_nodes: int
    x: Optional[Tensor] = None

    @property
    def num_classes(self) -> int:
        """Number of classes: ``y.max() + 1``."""
        return int(self.y.max()) + 1
