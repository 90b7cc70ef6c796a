"""What a workload is, and the profiles: each op family's workloads
(``ops/<family>/*_bench.py``, installed as ``torchplug.ops.<family>``) at the
sizes that suit a machine.

A family's bench module defines ``workloads(scale) -> tuple[Workload, ...]``;
each workload its sizes, inputs, byte model and :meth:`Workload.lineup`, the
candidates it runs (torchplug and what a user would call instead).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar, Protocol

import torch
from torch import Tensor

from torchplug.ops import bench_modules

if TYPE_CHECKING:
    from .candidates import Lineup


def count_label(n: int) -> str:
    """``10_000_000 -> "10M"``, ``200_000 -> "200K"``, ``2**29 -> "2^29"``."""
    if n >= 1024 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    for unit, size in (("M", 1_000_000), ("K", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def dtype_label(dtype: torch.dtype) -> str:
    """``torch.float32 -> "float32"``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class ScatterInputs:
    """``src [E, F]`` (``[F, E]`` for a reduction along the last dim) and
    ``index [E]`` (int64, values in ``[0, N)``); ``dim`` is the dimension of
    ``src`` reduced."""

    src: Tensor
    index: Tensor
    dim: int = 0


def power_law(n: int, count: int, device: torch.device, exponent: float = 2.0) -> Tensor:
    """``count`` int64 values in ``[0, n)`` with Chung-Lu degrees: the ``k``-th
    most likely value has weight ``k ** (-1 / (exponent - 1))``, so that how
    often each value occurs follows a power law of that exponent (2 to 2.5
    for citation, social and product graphs; 2 gives the largest hubs, about
    ``count / ln n`` for the first). Values are ranked by a random
    permutation, so hubs lie anywhere in ``[0, n)``."""
    weight = torch.arange(1, n + 1, device=device, dtype=torch.float64).pow_(-1 / (exponent - 1))
    cumulative = weight.cumsum_(0)
    rank = torch.searchsorted(cumulative, torch.rand(count, device=device, dtype=torch.float64) * cumulative[-1])
    return torch.randperm(n, device=device)[rank.clamp_(max=n - 1)]


def draw_index(n: int, count: int, device: torch.device, exponent: float | None) -> Tensor:
    """``count`` int64 values in ``[0, n)``: uniform where ``exponent`` is
    None, else :func:`power_law`'s."""
    if exponent is None:
        return torch.randint(0, n, (count,), device=device)
    return power_law(n, count, device, exponent)


def largest_row(n: int, count: int, exponent: float | None) -> float:
    """About how often :func:`draw_index`'s most frequent value occurs (at
    least 1): the tolerance's terms per output."""
    if exponent is None:
        return max(1.0, count / n)
    weights = torch.arange(1, n + 1, dtype=torch.float64).pow_(-1 / (exponent - 1))
    return max(1.0, count / float(weights.sum()))


def degrees_label(exponent: float | None, uniform: str = "uniform") -> str:
    """``"power-law 2.5"``, or ``uniform`` where ``exponent`` is None."""
    return uniform if exponent is None else f"power-law {exponent:g}"


def index_label(exponent: float | None, sorted_index: bool) -> str:
    """How a scatter index is made: ``"random"``, ``"power-law 2.5"``, either
    sorted (``"sorted"``, ``"sorted power-law 2.5"``)."""
    degrees = degrees_label(exponent, "random")
    if not sorted_index:
        return degrees
    return "sorted" if exponent is None else f"sorted {degrees}"


def small_graph_sizes(graphs: int, low: int, high: int, device: torch.device) -> Tensor:
    """A batch of ``graphs`` small graphs' node counts, uniform in ``[low, high]``
    (molecule datasets: 15 to 35 nodes)."""
    return torch.randint(low, high + 1, (graphs,), device=device)


class Workload(Protocol):
    """One benchmark case: ``op`` names its family's table rows (``--only``).
    A workload whose outputs are random may define ``agrees(out, reference)
    -> bool``, which then replaces the tolerance check."""

    op: ClassVar[str]

    @property
    def name(self) -> str:
        """The table label."""

    @property
    def terms_per_output(self) -> float:
        """How many source values one output sums at most, for the tolerance."""

    def min_bytes(self) -> int:
        """The bytes any implementation must read and write."""

    def params(self) -> dict[str, object]:
        """The sizes, for the JSON record."""

    def lineup(self, device: torch.device) -> Lineup:
        """The inputs on ``device`` and the candidates over them."""


#: ``--only real``: the workloads of real graphs' shapes, across families.
REAL = "real"


def is_real(workload: Workload) -> bool:
    """Whether ``workload`` has a real graph's shape: power-law degrees (an
    ``exponent`` that is set) or a batch of small graphs (``graphs``)."""
    return getattr(workload, "exponent", None) is not None or hasattr(workload, "graphs")


@dataclass(frozen=True)
class Scale:
    """The sizes a profile asks of every family: on a large GPU (``gpu``)
    each family's own GPU set; else ``e`` sources (edges) into ``n`` slots
    (nodes) and ``numel`` elements for elementwise ops."""

    gpu: bool
    e: int = 0
    n: int = 0
    numel: int = 0


@dataclass(frozen=True)
class Profile:
    """A set of workloads with the repeat counts and copy size that suit a machine."""

    name: str
    workloads: tuple[Workload, ...]
    copy_numel: int  #: float32 elements in the copy-bandwidth measurement
    warmup: int
    repeats: int


def family_workloads(scale: Scale) -> tuple[Workload, ...]:
    """Every family's workloads at ``scale``, family by family."""
    return tuple(w for module in workload_modules() for w in module.workloads(scale))


def workload_modules() -> list[ModuleType]:
    """Every family's bench module, then the PyG backend's where
    torch_geometric is installed."""
    modules = bench_modules()
    if importlib.util.find_spec("torch_geometric") is not None:
        modules.append(importlib.import_module("torchplug.pyg.pyg_bench"))
    return modules


def _profile(name: str, scale: Scale, copy_numel: int, warmup: int, repeats: int) -> Profile:
    return Profile(name, family_workloads(scale), copy_numel, warmup, repeats)


def select_profile(device: torch.device, quick: bool, tiny: bool) -> Profile:
    """``tiny`` (tests) > ``quick`` (a 2-core machine in under a minute) > the
    device's full set: on a GPU (an H200) inputs far beyond L2."""
    if tiny:
        return _profile("tiny", Scale(False, 4096, 512, 2**12), 2**16, warmup=1, repeats=2)
    if quick:
        return _profile("quick", Scale(False, 500_000, 50_000, 2**23), 2**24, warmup=1, repeats=5)
    if device.type == "cuda":
        return _profile("gpu", Scale(True), 2**29, warmup=5, repeats=20)
    return _profile("cpu", Scale(False, 2_000_000, 200_000, 2**25), 2**26, warmup=2, repeats=10)
