"""Zachary's karate club (W. W. Zachary, 1977), shipped as plain data.

34 club members, 78 undirected friendships, and the club each member joined
after the club split: ``0`` for Mr. Hi's club, ``1`` for the Officer's. The
data matches ``networkx.karate_club_graph()`` (its ``'club'`` node attribute):
17 members on each side.
"""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

import torch

from .graph import Graph

NUM_NODES: int = 34

#: The 78 undirected edges as ``(u, v)`` with ``u < v``, 0-based node ids.
EDGES: List[Tuple[int, int]] = [
    (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (0, 8),
    (0, 10), (0, 11), (0, 12), (0, 13), (0, 17), (0, 19), (0, 21), (0, 31),
    (1, 2), (1, 3), (1, 7), (1, 13), (1, 17), (1, 19), (1, 21), (1, 30),
    (2, 3), (2, 7), (2, 8), (2, 9), (2, 13), (2, 27), (2, 28), (2, 32),
    (3, 7), (3, 12), (3, 13),
    (4, 6), (4, 10),
    (5, 6), (5, 10), (5, 16),
    (6, 16),
    (8, 30), (8, 32), (8, 33),
    (9, 33),
    (13, 33),
    (14, 32), (14, 33),
    (15, 32), (15, 33),
    (18, 32), (18, 33),
    (19, 33),
    (20, 32), (20, 33),
    (22, 32), (22, 33),
    (23, 25), (23, 27), (23, 29), (23, 32), (23, 33),
    (24, 25), (24, 27), (24, 31),
    (25, 31),
    (26, 29), (26, 33),
    (27, 33),
    (28, 31), (28, 33),
    (29, 32), (29, 33),
    (30, 32), (30, 33),
    (31, 32), (31, 33),
    (32, 33),
]

#: Club after the split, per node: 0 = "Mr. Hi", 1 = "Officer".
CLUB: List[int] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 1,  # nodes 0-9
    0, 0, 0, 0, 1, 1, 0, 0, 1, 0,  # nodes 10-19
    1, 0, 1, 1, 1, 1, 1, 1, 1, 1,  # nodes 20-29
    1, 1, 1, 1,                    # nodes 30-33
]


def karate_club(device: Optional[Union[str, torch.device]] = None) -> Graph:
    """Zachary's karate club as a :class:`Graph`.

    Args:
        device: where to put the tensors; CPU when ``None``.

    Returns:
        ``Graph`` with ``edge_index`` ``[2, 156]`` int64 (each of the 78
        edges in both directions), ``y`` ``[34]`` int64 club labels and
        ``num_nodes = 34``; no features (``x is None``).
    """
    one_way = torch.tensor(EDGES, dtype=torch.long).t()
    edge_index = torch.cat([one_way, one_way.flip(0)], dim=1)
    y = torch.tensor(CLUB, dtype=torch.long)
    return Graph(edge_index=edge_index.to(device), y=y.to(device), num_nodes=NUM_NODES)
