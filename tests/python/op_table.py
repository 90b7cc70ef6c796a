"""The op table: one row per torchplug op, in the spirit of PyTorch's OpInfo.

Each op family's rows live in its folder, ``ops/<family>/<family>_rows.py``
(a ``ROWS`` list of :class:`OpRow` subclasses), and are discovered here: a
new op joins the per-op table suite (test_op_table.py) and the cross-op
suites (compiler stacks, threads, special values, properties, CUDA
reliability) by adding rows there.

A row is the interface those suites read: the op's callables (the friendly
``torchplug`` function, the functional schema ``torch.ops.torchplug.<name>``
and the in-place schema) and how to call each on a :class:`Sample`; the
sample inputs it is tested on (dtypes x devices x shapes: empty, 1-D, N-D,
negative dim, non-contiguous, broadcast index, ``out=``, ``dim_size``); a
plain-PyTorch reference with its tolerance rule (:meth:`OpRow.check`); which
outputs are differentiable and which are args (int64 positions), and the
gradient reference. This module also holds the sample builders families
share (values suited to a reduction, index, indptr).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Optional

import pytest
import torch
from torch import Tensor

import torchplug
from conftest import OP_DIRS

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.int32, torch.int64)
#: (rtol, atol) per dtype of a result against its float64 reference: float16
#: and bfloat16 compute in float32 and round once.
TOLERANCE = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2), torch.float32: (1e-5, 1e-5),
             torch.float64: (1e-10, 1e-10)}


@dataclass
class Sample:
    """One call: ``inputs`` are (src, index) for a scatter op, (a, b) for add;
    ``out`` (scatter ops) is the tensor to reduce into, never touched by the
    table itself (callers pass ``sample.fresh_out()``)."""

    inputs: tuple
    dim: int = -1
    dim_size: Optional[int] = None
    out: Optional[Tensor] = None
    desc: str = ""

    def fresh_out(self) -> Optional[Tensor]:
        """A copy of ``out`` with the same strides (so a non-contiguous out= stays one)."""
        if self.out is None:
            return None
        copy = torch.empty_strided(self.out.shape, self.out.stride(), dtype=self.out.dtype,
                                   device=self.out.device)
        return copy.copy_(self.out)

    def __repr__(self) -> str:
        shapes = [tuple(t.shape) for t in self.inputs]
        return (f"Sample({self.desc}: inputs {shapes} {[t.dtype for t in self.inputs]}, dim={self.dim}, "
                f"dim_size={self.dim_size}, out={None if self.out is None else tuple(self.out.shape)})")


@dataclass
class OpRow:
    """One op. Subclasses (one per way of calling, in the family's folder)
    say how to call it, build its samples, compute its reference and its
    gradient; the class attributes say what the suites may ask of it."""

    name: str
    dtypes: tuple
    #: positions of the outputs autograd differentiates (empty: an op without
    #: gradients, e.g. the samplers, whose rows the gradient suites skip); of
    #: the int64 arg outputs
    differentiable: tuple = (0,)
    args: tuple = ()
    gradgrad: bool = True
    #: gradcheck's tolerance for run-to-run differences of the gradient on
    #: CUDA: the composites' backward sums each group in the order of a
    #: counting sort (the scatter family's backward is a gather: exact)
    cuda_nondet_tol: float = 0.0
    inplace: Optional[str] = None  # the in-place schema's name

    #: how many leading inputs are differentiable (add: a and b; else the first)
    leaf_count: ClassVar[int] = 1
    #: whether out='s initial value takes part and gets a gradient (the ops
    #: that reduce into out); the others overwrite out, and their out= form
    #: is not differentiable
    out_differentiable: ClassVar[bool] = False
    #: whether its float results are the same bits on every run on CUDA (no atomics)
    bitwise_repeatable: ClassVar[bool] = False
    #: the position, among the functional schema's arguments, of the output
    #: size that is read off the index or indptr when None
    size_arg: ClassVar[Optional[int]] = None
    #: whether the op runs on fake tensors (a Meta kernel): opcheck's
    #: faketensor and AOT-dispatch checks need it; ops whose output sizes
    #: depend on the values they compute and that have no Meta kernel (the
    #: samplers') skip those checks
    fake_tensors: ClassVar[bool] = True

    # ------------------------------------------------------------------ callables
    @property
    def param(self):
        return pytest.param(self, id=self.name)

    def fn(self) -> Callable:
        """The friendly function, torchplug.<name>."""
        return getattr(torchplug, self.name)

    def op(self):
        return getattr(torch.ops.torchplug, self.name).default

    def inplace_op(self):
        return getattr(torch.ops.torchplug, self.inplace).default

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        """``fn`` (the friendly function or a stand-in) on ``inputs`` (the
        sample's, or leaves in place of the leading ones) with out= ``out``."""
        raise NotImplementedError

    def functional_args(self, sample: Sample) -> tuple:
        """The functional schema's arguments for ``sample``."""
        raise NotImplementedError

    def inplace_args(self, sample: Sample, out: Tensor) -> tuple:
        """The in-place schema's arguments for ``sample``, into ``out``."""
        raise NotImplementedError

    def call(self, sample: Sample, out: Optional[Tensor] = None) -> tuple:
        """The friendly function on `sample` (out= is `out`, else a fresh copy
        of the sample's); always a tuple of outputs."""
        return self.call_with(sample.inputs[:self.leaf_count], sample,
                              sample.fresh_out() if out is None else out)

    def call_with(self, leaves, sample: Sample, out: Optional[Tensor] = None,
                  fn: Optional[Callable] = None) -> tuple:
        """`fn` (the friendly function by default, or e.g. its scripted form)
        on `sample` with `leaves` in place of its leading inputs and out= `out`
        (none unless given); always a tuple of outputs."""
        fn = self.fn() if fn is None else fn
        inputs = tuple(leaves) + tuple(sample.inputs[len(leaves):])
        return _tuple(self.invoke(fn, inputs, sample, out))

    def call_schema(self, sample: Sample, out: Optional[Tensor] = None) -> tuple:
        """The schema-level ops: the functional one without out=, the in-place
        one (returning out and, for ops with an arg, the arg it returns) with."""
        if sample.out is None:
            op, args = self.schema_args(sample)
            return _tuple(op(*args))
        if out is None:
            out = sample.fresh_out()
        op, args = self.schema_args(sample, out)
        result = op(*args)
        if self.args:
            return (out, result)
        assert result is None, f"{self.inplace} returned {type(result)}"
        return (out,)

    def generic_fn(self) -> Optional[Callable]:
        """The family's function that takes the reduction by name
        (torchplug.scatter, segment_csr, segment_coo); None for ops without one."""
        return None

    def call_generic(self, sample: Sample, out: Optional[Tensor] = None,
                     fn: Optional[Callable] = None) -> Optional[tuple]:
        """generic_fn (or `fn`, e.g. its scripted form) with the row's
        reduction by name: only the values, as for min/max; None for ops
        without one."""
        return None

    def sizes_from_data(self, op, args: tuple) -> bool:
        """Whether the schema call `op(*args)` sizes its output by the values
        of its index or indptr (no dim_size given)."""
        return op == self.op() and self.size_arg is not None and args[self.size_arg] is None

    def schema_args(self, sample: Sample, out: Optional[Tensor] = None) -> tuple[object, tuple]:
        """(op overload, args) of the schema call (for opcheck): the functional
        schema, or for a sample with out= the in-place one (into `out`, else a
        fresh copy of the sample's)."""
        if sample.out is None:
            return self.op(), self.functional_args(sample)
        return self.inplace_op(), self.inplace_args(sample, sample.fresh_out() if out is None else out)

    # ------------------------------------------------------------------ samples
    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        """The shape classes the op is checked on, in `dtype`."""
        raise NotImplementedError

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        """float64 samples for gradcheck: non-empty, distinct values (min/max
        are not differentiable at ties), mul with zeros in some slots."""
        raise NotImplementedError

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        """A sample big enough for every CUDA strategy's parallel paths: E
        positions of F values and N slots (add: a broadcast pair of E x F and F)."""
        raise NotImplementedError

    def thread_samples(self, seed: int, device: str) -> list[Sample]:
        """What test_threads.py calls from 8 threads at once: every sample in
        float32 and a large one."""
        return self.samples(device, torch.float32, seed) + [self.large_sample(torch.float32, device, seed)]

    def backward_sample(self, g: torch.Generator, seed: int, device: str, E: int, F: int, N: int) -> Sample:
        """A float64 sample of E x F values into N slots whose backward
        test_threads.py runs from 8 threads (drawn from `g` or from `seed`)."""
        return self.large_sample(torch.float64, device, seed, E=E, F=F, N=N)

    # ------------------------------------------------------------------ reference
    def reference(self, sample: Sample):
        """The plain-PyTorch result of the call on `sample`."""
        raise NotImplementedError

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        """The outputs of a call on `sample` against the reference, within
        the row's tolerance rule (every arg exactly; only the values with
        `values_only`)."""
        raise NotImplementedError

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        """The gradients w.r.t. the differentiable inputs (and out='s initial
        value when it takes part) for `grad` of output 0."""
        raise NotImplementedError


class ScatterCallRow(OpRow):
    """An op called as scatter is: ``fn(src, index, dim, out, dim_size)``, the
    schemas ``op(src, index, dim, dim_size)`` and ``op_(out, src, index, dim)``."""

    size_arg = 3

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(inputs[0], inputs[1], sample.dim, out, sample.dim_size)

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs + (sample.dim, sample.dim_size)

    def inplace_args(self, sample: Sample, out: Tensor) -> tuple:
        return (out,) + sample.inputs + (sample.dim,)


def _tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def assert_bitwise(actual: Tensor, expected: Tensor, context: str = "") -> None:
    """Same shape, dtype, device and values; NaN where expected is NaN; for
    floats the same sign of zero."""
    assert actual.shape == expected.shape, context
    assert actual.dtype == expected.dtype, context
    assert actual.device == expected.device, context
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True,
                               msg=lambda m: f"{context}\n{m}")
    if expected.dtype.is_floating_point:
        not_nan = ~torch.isnan(expected)
        assert torch.equal(torch.signbit(actual)[not_nan], torch.signbit(expected)[not_nan]), (
            f"{context}: sign of zero differs")


# --------------------------------------------------------------------------- sample inputs


def values(shape, dtype: torch.dtype, reduce: Optional[str], g: torch.Generator,
           ties: bool = False, zeros: bool = True) -> Tensor:
    """CPU values of `shape` suited to `reduce`: normal floats (sum, mean,
    min, max; multiples of 1/4 with `ties`, so equal values meet in a slot),
    small integers; for mul factors of log-uniform magnitude in [0.8, 1.25]
    with about one in eight an exact zero (integers: -1, 0, 1, and 2 now and
    then), so no product overflows or leaves the normal range of float32
    (float16 up to a few hundred factors a slot); without
    `zeros`, no factor is 0 (so that losing one changes every product)."""
    if reduce == "mul":
        if dtype.is_floating_point:
            # Log-uniform, so that long products drift neither up nor down (a
            # uniform magnitude grows them by about 1.7% a factor: 200 of them
            # overflowed float16 now and then).
            log_mag = torch.empty(shape, dtype=torch.float64).uniform_(math.log(0.8), math.log(1.25), generator=g)
            mag = log_mag.exp()
            sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
            zero = torch.rand(shape, generator=g) < (0.125 if zeros else 0.0)
            return torch.where(zero, 0.0, mag * sign).to(dtype)
        t = torch.randint(-1, 2, shape, generator=g)
        two = torch.rand(shape, generator=g) < 0.05
        t = torch.where(two, 2, t)
        return (t if zeros else torch.where(t == 0, -1, t)).to(dtype)
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=g, dtype=torch.float64)
        if ties:
            t = (t * 4).round() / 4
        return t.to(dtype)
    hi = 5 if ties else 50
    return torch.randint(-hi, hi, shape, generator=g).to(dtype)


def randn(shape, dtype: torch.dtype, g: torch.Generator, device: str) -> Tensor:
    """Normal values drawn in float64, rounded once to `dtype`, on `device`."""
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device)


def randint(lo: int, hi: int, shape, g: torch.Generator, device: str, dtype=torch.int64) -> Tensor:
    """Integers in [lo, hi) drawn as int64, then cast to `dtype`, on `device`."""
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype).to(device)


def rand_index(shape, n: int, g: torch.Generator) -> Tensor:
    return torch.randint(0, max(n, 1), shape, generator=g) if n > 0 else torch.zeros(shape, dtype=torch.long)


def scatter_samples(reduce: str, device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
    """Every shape class of docs/ops.md for one reduction and dtype."""
    v = lambda shape, ties=False: values(shape, dtype, reduce, g, ties)  # noqa: E731
    out_v = lambda shape: values(shape, dtype, reduce, g)  # noqa: E731
    to = lambda t: t.to(device)  # noqa: E731
    samples = [
        Sample((to(v((37,))), to(rand_index((37,), 9, g))), 0, None, None, "1-D"),
        Sample((to(v((50, 7))), to(rand_index((50,), 11, g))), 0, 13, None, "2-D dim_size"),
        Sample((to(v((3, 40, 5))), to(rand_index((40,), 6, g))), -2, None, None, "3-D negative dim"),
        Sample((to(v((7, 50))), to(rand_index((50,), 11, g))), -1, None, None, "dim -1"),
        Sample((to(v((4, 30))), to(rand_index((4, 30), 8, g))), 1, None, None, "full index"),
        Sample((to(v((4, 30, 3))), to(rand_index((4, 30), 8, g))), 1, None, None, "broadcast index [B, E]"),
        Sample((to(v((30, 4, 3))), to(rand_index((30, 1), 8, g))), 0, 9, None, "broadcast index [E, 1]"),
        Sample((to(v((7, 50))).t(), to(rand_index((100,), 11, g))[::2]), 0, None, None, "non-contiguous"),
        Sample((to(v((2, 3, 33, 2))), to(rand_index((33,), 5, g))), 2, None, None, "4-D"),
        Sample((to(v((40, 3), ties=True)), to(rand_index((40,), 6, g))), 0, None, None, "ties"),
        Sample((to(v((50, 7))), to(rand_index((50,), 11, g))), 0, None, to(out_v((12, 7))), "out="),
        Sample((to(v((50, 7))), to(rand_index((50,), 11, g))), 0, None, to(out_v((7, 12))).t(), "out= transposed"),
        Sample((to(v((40, 3), ties=True)), to(rand_index((40,), 6, g))), 0, None,
               to(values((6, 3), dtype, reduce, g, ties=True)), "out= ties"),
        Sample((to(v((0, 3))), to(rand_index((0,), 4, g))), 0, 4, None, "empty src, dim_size"),
        Sample((to(v((0, 3))), to(rand_index((0,), 4, g))), 0, None, None, "empty src, default size"),
        Sample((to(v((5, 0))), to(rand_index((5,), 4, g))), 0, None, None, "empty rows"),
        Sample((to(v((0, 3))), to(rand_index((0,), 4, g))), 0, None, to(out_v((4, 3))), "empty src, out="),
        Sample((to(v((6, 2))), to(rand_index((6,), 3, g))), 0, 3, None, "small"),
    ]
    return samples


def scatter_grad_samples(reduce: str, device: str, g: torch.Generator) -> list[Sample]:
    """float64 samples for gradcheck (see OpRow.grad_samples)."""
    f64 = torch.float64

    def v(shape):
        if reduce == "mul":
            return values(shape, f64, reduce, g).to(device)
        return torch.randn(shape, generator=g, dtype=f64).to(device)

    return [
        Sample((v((12, 3)), rand_index((12,), 5, g).to(device)), 0, 6, None, "1-D index, dim_size"),
        Sample((v((3, 12)), rand_index((3, 12), 4, g).to(device)), -1, None, None, "full index, dim -1"),
        Sample((v((2, 10, 2)), rand_index((2, 10), 4, g).to(device)), 1, 4, None, "broadcast index"),
        Sample((v((12, 3)), rand_index((12,), 5, g).to(device)), 0, None, v((5, 3)), "out="),
    ]


def rand_indptr(segments: int, total: int, g: torch.Generator) -> Tensor:
    """[segments + 1] from 0 to `total`, empty segments now and then."""
    cuts = torch.randint(0, total + 1, (max(segments - 1, 0),), generator=g).sort().values
    return torch.cat([torch.tensor([0]), cuts, torch.tensor([total])]) if segments > 0 else torch.tensor([0])


def rand_sorted_index(shape, n: int, g: torch.Generator) -> Tensor:
    return rand_index(shape, n, g).sort(dim=-1).values


# --------------------------------------------------------------------------- rows


def rows_param(rows: Optional[list[OpRow]] = None) -> list:
    """pytest.param per row (every row of the table by default), for parametrize("row", ...)."""
    return [row.param for row in (ROWS if rows is None else rows)]


def _family_rows(folder: Path) -> list[OpRow]:
    """The ROWS of every ``<folder>/*_rows.py`` (conftest.py puts the op folders on the path)."""
    return [row for path in sorted(folder.glob("*_rows.py")) for row in importlib.import_module(path.stem).ROWS]


#: The rows of every op folder, folder by folder.
ROWS_BY_FOLDER: dict[str, list[OpRow]] = {folder.name: _family_rows(folder) for folder in OP_DIRS}
ROWS: list[OpRow] = [row for rows in ROWS_BY_FOLDER.values() for row in rows]
BY_NAME = {row.name: row for row in ROWS}


# --------------------------------------------------------------------------- deterministic mode

#: The deterministic-mode sizes: E sources into N slots (groups, rows); the
#: power-law index puts DET_HUB more sources into one slot (about 3.7K, past
#: CUDA's ordered blocks of 1024 sources).
DET_E, DET_N, DET_HUB = 8_000, 500, 3_000


def det_index(kind: str, E: int, N: int, g: torch.Generator) -> Tensor:
    """A CPU index of E values in [0, N): "random" uniform; "power-law" slot
    k drawn with weight 1 / (k + 1), DET_HUB more entries in its largest
    slot, slots relabelled at random and entries in random order (a hub
    spread over the whole index)."""
    if kind == "random":
        return torch.randint(0, N, (E,), generator=g)
    weights = 1.0 / torch.arange(1, N + 1, dtype=torch.float64)
    drawn = torch.multinomial(weights, E - DET_HUB, replacement=True, generator=g)
    drawn = torch.cat([torch.zeros(DET_HUB, dtype=torch.long), drawn])
    return torch.randperm(N, generator=g)[drawn][torch.randperm(E, generator=g)]


@contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """Runs the block under torch.use_deterministic_algorithms(True), then restores the mode."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@contextmanager
def cpu_threads(n: int) -> Iterator[None]:
    """Runs the block with torch's CPU thread count at n, then restores it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
