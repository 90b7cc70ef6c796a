"""Built-in graphs for examples and tests; plain data, no downloads.

- :func:`karate_club`: Zachary's karate club, 34 nodes, 2 classes.
- :func:`random_graph`: a planted-partition graph of any size with features.
- :func:`power_law_graph`: the same labels and features over Chung-Lu
  power-law degrees (hubs and a long tail).
"""

from .graph import Graph
from .karate import karate_club
from .synthetic import power_law_graph, random_graph

__all__ = ["Graph", "karate_club", "power_law_graph", "random_graph"]
