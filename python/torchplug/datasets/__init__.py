"""Built-in graphs for examples and tests; plain data, no downloads.

- :func:`karate_club`: Zachary's karate club, 34 nodes, 2 classes.
- :func:`random_graph`: a planted-partition graph of any size with features.
"""

from .graph import Graph
from .karate import karate_club
from .synthetic import random_graph

__all__ = ["Graph", "karate_club", "random_graph"]
