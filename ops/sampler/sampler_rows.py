"""The sampler's op-table rows (tests/python/op_table.py) on the cases with
no randomness, so that the cross-op suites can compare a call with the
reference and with itself: neighbor_sample with every fanout -1 (whole
neighbourhoods), random_walk on graphs where a node has one out-edge or none
(no step has a choice), and subgraph, and gather_rows. The graph ops take the index dtypes (int32,
int64) where the table's floats go; a suite asking for a float dtype gets
int64. A sample's ``inputs`` are ``(rowptr, col, seed)`` (subgraph: the
nodes), and its ``dim`` the op's one integer: neighbor_sample's number of
hops, random_walk's length.

The ops have no gradients (``differentiable=()``), and neighbor_sample's and
subgraph's result sizes depend on the values sampled, so they have no Meta
kernel (``fake_tensors = False``). On a device where the op has no kernel
(the registry's backends: CUDA, for now), the samples skip the test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

import pytest
import torch
from torch import Tensor

import torchplug
from op_table import FLOATS, INTS, OpRow, Sample
from sampler_reference import (neighbor_sample_reference, one_out_edge_graph, random_graph, subgraph_reference,
                               walk_reference)


def skip_without_kernel(name: str, device) -> None:
    """Skips the calling test where torchplug::<name> has no kernel for `device`."""
    kind = torch.device(device).type.upper()
    backends = next(info.backends for info in torchplug.registry() if info.qualified_name == f"torchplug::{name}")
    if kind not in backends:
        pytest.skip(f"torchplug::{name} has no {kind} kernel yet")


def index_dtype(dtype: torch.dtype) -> torch.dtype:
    """`dtype` if it is an index dtype, else int64 (the suites that pass a float
    dtype ask for samples of the op, whatever their dtype)."""
    return dtype if dtype in INTS else torch.int64


def spread(t: Tensor) -> Tensor:
    """A non-contiguous copy of 1-D `t` (every other value of a longer one)."""
    wide = torch.zeros(2 * t.numel(), dtype=t.dtype)
    wide[::2] = t
    return wide[::2]


def make_sample(rowptr: Tensor, col: Tensor, seed: Tensor, integer: int, dtype: torch.dtype, device: str,
                desc: str, contiguous: bool = True) -> Sample:
    tensors = tuple(t.to(dtype) for t in (rowptr, col, seed))
    if not contiguous:
        tensors = tuple(spread(t) for t in tensors)
    return Sample(tuple(t.to(device) for t in tensors), integer, desc=desc)


@dataclass
class SamplerRow(OpRow):
    """One sampler op on samples (rowptr, col, seed or nodes) without randomness."""

    fake_tensors: ClassVar[bool] = False
    def as_tensors(self, outputs, device) -> tuple:
        """The outputs with the integer lists as int64 tensors on `device` (the
        suites compare tensors)."""
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        return tuple(torch.tensor(o, dtype=torch.long, device=device) if isinstance(o, list) else o
                     for o in outputs)

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        skip_without_kernel(self.name, device)
        return self.build(device, index_dtype(dtype), torch.Generator().manual_seed(seed))

    def build(self, device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
        raise NotImplementedError

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        return []  # no gradients

    def thread_samples(self, seed: int, device: str) -> list[Sample]:
        return self.samples(device, torch.int64, seed) + [self.large_sample(torch.int32, device, seed)]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        skip_without_kernel(self.name, device)
        return self.build_large(index_dtype(dtype), str(device), torch.Generator().manual_seed(seed), E, F, N)

    def build_large(self, dtype: torch.dtype, device: str, g: torch.Generator, E: int, F: int, N: int) -> Sample:
        raise NotImplementedError

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        context = f"{self.name} {sample!r} {context}"
        device = sample.inputs[0].device
        got = self.as_tensors(outputs, device)
        want = self.as_tensors(self.reference(sample), "cpu")
        assert len(got) == len(want), context
        for position, (a, b) in enumerate(zip(got, want)):
            assert (a is None) == (b is None), f"{context}: output {position}"
            if a is None:
                continue
            assert a.device == device and a.dtype == b.dtype and a.shape == b.shape, (
                f"{context}: output {position} {a.dtype} {tuple(a.shape)} on {a.device}, "
                f"expected {b.dtype} {tuple(b.shape)}")
            assert torch.equal(a.cpu(), b), f"{context}: output {position}\n got  {a.tolist()}\n want {b.tolist()}"

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        raise NotImplementedError("the samplers have no gradients")


class NeighborSampleRow(SamplerRow):
    """``neighbor_sample(rowptr, col, seed, [-1] * hops)``: every neighbourhood whole."""

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return self.as_tensors(fn(*inputs, [-1] * sample.dim), inputs[0].device)

    def functional_args(self, sample: Sample) -> tuple:
        return (*sample.inputs, [-1] * sample.dim, None, None, None, None, False, False, True, False, "uniform",
                True, None)

    def reference(self, sample: Sample):
        return neighbor_sample_reference(*(t.cpu() for t in sample.inputs), [-1] * sample.dim)

    def build(self, device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
        rowptr, col = random_graph(30, 90, g)
        seeds = torch.randperm(30, generator=g)[:4]
        cycle = torch.arange(0, 13, 2), torch.tensor([[(i - 1) % 6, (i + 1) % 6] for i in range(6)]).view(-1)
        none = torch.zeros(0, dtype=torch.long)
        return [make_sample(*s, dtype, device, desc, contiguous) for *s, desc, contiguous in [
            (rowptr, col, seeds, 2, "2 hops", True),
            (rowptr, col, seeds, 0, "0 hops", True),
            (rowptr, col, none, 2, "no seeds", True),
            (*cycle, torch.tensor([2, 3]), 3, "pyg-lib's cycle, 3 hops", True),
            (torch.zeros(6, dtype=torch.long), none, torch.tensor([4, 0, 2]), 2, "no edges", True),
            (torch.zeros(1, dtype=torch.long), none, none, 1, "no nodes", True),
            (rowptr, col, seeds, 2, "non-contiguous", False),
        ]]

    def build_large(self, dtype: torch.dtype, device: str, g: torch.Generator, E: int, F: int, N: int) -> Sample:
        rowptr, col = random_graph(N, E, g)
        return make_sample(rowptr, col, torch.randperm(N, generator=g)[:F], 2, dtype, device, f"N={N} E={E}")


class RandomWalkRow(SamplerRow):
    """``random_walk(rowptr, col, seed, walk_length)`` on graphs without a choice."""

    fake_tensors = True  # it has a Meta kernel: [S, walk_length + 1]

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(*inputs, sample.dim)

    def functional_args(self, sample: Sample) -> tuple:
        return (*sample.inputs, sample.dim, 1.0, 1.0, None)

    def reference(self, sample: Sample):
        return walk_reference(*(t.cpu() for t in sample.inputs), sample.dim)

    def build(self, device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
        rowptr, col = one_out_edge_graph(20, g, isolated=3)
        seeds = torch.randint(0, 20, (12,), generator=g)
        loops = torch.tensor([0, 1, 2, 3, 4, 4]), torch.arange(4)  # 0..3 loop on themselves, 4 has no edge
        none = torch.zeros(0, dtype=torch.long)
        return [make_sample(*s, dtype, device, desc, contiguous) for *s, desc, contiguous in [
            (rowptr, col, seeds, 6, "length 6", True),
            (rowptr, col, seeds, 0, "length 0", True),
            (rowptr, col, none, 3, "no seeds", True),
            (*loops, torch.tensor([0, 4, 3]), 4, "self-loops", True),
            (torch.zeros(5, dtype=torch.long), none, torch.tensor([3, 0]), 5, "no edges", True),
            (rowptr, col, seeds, 6, "non-contiguous", False),
        ]]

    def build_large(self, dtype: torch.dtype, device: str, g: torch.Generator, E: int, F: int, N: int) -> Sample:
        rowptr, col = one_out_edge_graph(N, g, isolated=N // 50)
        return make_sample(rowptr, col, torch.randint(0, N, (E // 10,), generator=g), F, dtype, device,
                           f"N={N} walks={E // 10} length={F}")


class SubgraphRow(SamplerRow):
    """``subgraph(rowptr, col, nodes)``."""

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(*inputs)

    def functional_args(self, sample: Sample) -> tuple:
        return (*sample.inputs, True)

    def reference(self, sample: Sample):
        return subgraph_reference(*(t.cpu() for t in sample.inputs))

    def build(self, device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
        rowptr, col = random_graph(30, 120, g, reached=25)  # 25..29 have no edges
        some = torch.randperm(25, generator=g)[:12]
        none = torch.zeros(0, dtype=torch.long)
        return [make_sample(*s, dtype, device, desc, contiguous) for *s, desc, contiguous in [
            (rowptr, col, some, -1, "12 of 30 nodes", True),
            (rowptr, col, torch.randperm(30, generator=g), -1, "every node, permuted", True),
            (rowptr, col, none, -1, "no nodes", True),
            (rowptr, col, torch.tensor([27, 25, 29]), -1, "nodes without edges", True),
            (rowptr, col, torch.cat([torch.tensor([28]), some[:3], torch.tensor([26])]), -1, "and with", True),
            (torch.zeros(1, dtype=torch.long), none, none, -1, "empty graph", True),
            (rowptr, col, some, -1, "non-contiguous", False),
        ]]

    def build_large(self, dtype: torch.dtype, device: str, g: torch.Generator, E: int, F: int, N: int) -> Sample:
        rowptr, col = random_graph(N, E, g)
        return make_sample(rowptr, col, torch.randperm(N, generator=g)[:N // 2], -1, dtype, device,
                           f"N={N} E={E}, half the nodes")


class GatherRowsRow(SamplerRow):
    """``gather_rows(x, index)``: rows of ``x`` in the suite's dtype, by an
    int64 (one sample: int32) index."""

    fake_tensors = True  # it has a Meta kernel: [len(index), *x.shape[1:]]

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(*inputs)

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs

    def reference(self, sample: Sample):
        x, index = (t.cpu() for t in sample.inputs)
        return x.index_select(0, index.long())

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        skip_without_kernel(self.name, device)
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(40, 6, generator=g) * 100).to(dtype)
        index = torch.randint(0, 40, (25,), generator=g)
        return [Sample((t.to(device), i.to(device)), desc=desc) for t, i, desc in [
            (x, index, "rows of 6"),
            (x[:, 0].contiguous(), index, "1-D x"),
            (x.view(40, 3, 2), index, "3-D x"),
            (x[:, :3].contiguous(), index, "rows of 3 values"),
            (x, index.int(), "int32 index"),
            (x, index[:0], "empty index"),
            (x[:, ::2], index, "non-contiguous x"),
        ]]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        skip_without_kernel(self.name, device)
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(N, F, generator=g) * 100).to(dtype if dtype.is_floating_point or dtype in INTS
                                                       else torch.float32)
        return Sample((x.to(device), torch.randint(0, N, (E,), generator=g).to(device)), desc=f"N={N} n={E} F={F}")

    def thread_samples(self, seed: int, device: str) -> list[Sample]:
        return self.samples(device, torch.float32, seed) + [self.large_sample(torch.float32, device, seed)]


ROWS: list[OpRow] = [NeighborSampleRow("neighbor_sample", INTS, differentiable=()),
                     RandomWalkRow("random_walk", INTS, differentiable=()),
                     SubgraphRow("subgraph", INTS, differentiable=()),
                     GatherRowsRow("gather_rows", FLOATS + INTS, differentiable=())]
