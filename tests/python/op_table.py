"""The op table: one row per torchplug op, in the spirit of PyTorch's OpInfo.

A row names the op's callables (the friendly ``torchplug`` function, the
functional schema ``torch.ops.torchplug.<name>`` and the in-place schema), the
sample inputs it is tested on (dtypes x devices x shapes: empty, 1-D, N-D,
negative dim, non-contiguous, broadcast index, ``out=``, ``dim_size``), a
plain-PyTorch reference with its tolerance rule (scatter_reference.py), which
outputs are differentiable and which are args (int64 positions). The per-op
table suite (test_op_table.py) and the cross-op suites (compiler stacks,
threads, special values, properties, CUDA reliability) iterate over ROWS, so a
new op joins every one of them by adding a row here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest
import torch
from torch import Tensor

import torchplug
from scatter_reference import Reduced, assert_reduced_close, reduce_grad_reference, reduce_reference

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.int32, torch.int64)
SCATTER_DTYPES = FLOATS + INTS
ADD_DTYPES = FLOATS + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


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
    name: str
    kind: str  # "elementwise" or "scatter"
    dtypes: tuple
    #: positions of the outputs autograd differentiates; of the int64 arg outputs
    differentiable: tuple = (0,)
    args: tuple = ()
    reduce: Optional[str] = None  # scatter ops: torchplug.scatter(reduce=...)
    gradgrad: bool = True
    inplace: Optional[str] = None  # the in-place schema's name
    extra: dict = field(default_factory=dict)

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

    def call(self, sample: Sample, out: Optional[Tensor] = None) -> tuple:
        """The friendly function on `sample` (out= is `out`, else a fresh copy
        of the sample's); always a tuple of outputs."""
        if self.kind == "elementwise":
            return (self.fn()(*sample.inputs),)
        if out is None:
            out = sample.fresh_out()
        src, index = sample.inputs
        result = self.fn()(src, index, sample.dim, out=out, dim_size=sample.dim_size)
        return tuple(result) if isinstance(result, (tuple, list)) else (result,)

    def call_schema(self, sample: Sample, out: Optional[Tensor] = None) -> tuple:
        """The schema-level ops: the functional one without out=, the in-place
        one (returning out and, for ops with an arg, the arg it returns) with."""
        if self.kind == "elementwise":
            return (self.op()(*sample.inputs),)
        src, index = sample.inputs
        if sample.out is None:
            result = self.op()(src, index, sample.dim, sample.dim_size)
            return tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if out is None:
            out = sample.fresh_out()
        result = self.inplace_op()(out, src, index, sample.dim)
        if self.args:
            return (out, result)
        assert result is None, f"{self.inplace} returned {type(result)}"
        return (out,)

    def call_generic(self, sample: Sample, out: Optional[Tensor] = None) -> Optional[tuple]:
        """torchplug.scatter(reduce=row.reduce) (only the values, as for min/max);
        None for ops it does not cover."""
        if self.reduce is None:
            return None
        if out is None:
            out = sample.fresh_out()
        src, index = sample.inputs
        return (torchplug.scatter(src, index, sample.dim, out, sample.dim_size, self.reduce),)

    def schema_args(self, sample: Sample) -> tuple[object, tuple]:
        """(op overload, args) of the schema call for opcheck."""
        if self.kind == "elementwise":
            return self.op(), sample.inputs
        src, index = sample.inputs
        if sample.out is None:
            return self.op(), (src, index, sample.dim, sample.dim_size)
        return self.inplace_op(), (sample.fresh_out(), src, index, sample.dim)

    # ------------------------------------------------------------------ samples
    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        if self.kind == "elementwise":
            return add_samples(device, dtype, g)
        return scatter_samples(self.reduce, device, dtype, g)

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        """float64 samples for gradcheck: non-empty, distinct values (min/max
        are not differentiable at ties), mul with zeros in some slots."""
        g = torch.Generator().manual_seed(seed)
        if self.kind == "elementwise":
            return [s for s in add_samples(device, torch.float64, g)
                    if all(t.dtype == torch.float64 for t in s.inputs)]
        return scatter_grad_samples(self.reduce, device, g)

    # ------------------------------------------------------------------ reference
    def reference(self, sample: Sample):
        """Add: ``a + b``; scatter: a scatter_reference.Reduced."""
        if self.kind == "elementwise":
            a, b = sample.inputs
            return a + b
        src, index = sample.inputs
        return reduce_reference(src, index, sample.dim, self.reduce, sample.dim_size, sample.out)

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        """The outputs of a call on `sample` against the reference, within
        the row's tolerance rule (scatter_reference.assert_reduced_close;
        add and every arg: exact)."""
        context = f"{self.name} {sample!r} {context}"
        if self.kind == "elementwise":
            assert_bitwise(outputs[0], self.reference(sample), context)
            return
        ref = self.reference(sample)
        src = sample.inputs[0]
        assert outputs[0].device == src.device, context
        assert_reduced_close(outputs[0].cpu(), _cpu(ref), self.reduce, src.dtype, context)
        if values_only:
            return
        assert len(outputs) == 1 + len(self.args), context
        for position in self.args:
            arg = outputs[position]
            assert arg.dtype == torch.int64 and arg.shape == ref.value.shape, context
            torch.testing.assert_close(arg, ref.arg, rtol=0, atol=0, msg=lambda m: f"{context}: arg\n{m}")

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        """The gradients w.r.t. the differentiable inputs (add: a and b; scatter:
        src, then out='s initial value when given) for `grad` of output 0."""
        if self.kind == "elementwise":
            a, b = sample.inputs
            return (grad.sum_to_size(a.shape).to(a.dtype), grad.sum_to_size(b.shape).to(b.dtype))
        src, index = sample.inputs
        g_src, g_out = reduce_grad_reference(src, index, sample.dim, self.reduce, grad, sample.out,
                                             sample.dim_size)
        return (g_src,) if g_out is None else (g_src, g_out)


def _cpu(ref: Reduced) -> Reduced:
    return Reduced(*(None if t is None else t.cpu() for t in
                     (ref.value, ref.arg, ref.count, ref.terms, ref.mag)))


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


def _index(shape, n: int, g: torch.Generator) -> Tensor:
    return torch.randint(0, max(n, 1), shape, generator=g) if n > 0 else torch.zeros(shape, dtype=torch.long)


def scatter_samples(reduce: str, device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
    """Every shape class of docs/ops.md for one reduction and dtype."""
    v = lambda shape, ties=False: values(shape, dtype, reduce, g, ties)  # noqa: E731
    out_v = lambda shape: values(shape, dtype, reduce, g)  # noqa: E731
    to = lambda t: t.to(device)  # noqa: E731
    samples = [
        Sample((to(v((37,))), to(_index((37,), 9, g))), 0, None, None, "1-D"),
        Sample((to(v((50, 7))), to(_index((50,), 11, g))), 0, 13, None, "2-D dim_size"),
        Sample((to(v((3, 40, 5))), to(_index((40,), 6, g))), -2, None, None, "3-D negative dim"),
        Sample((to(v((7, 50))), to(_index((50,), 11, g))), -1, None, None, "dim -1"),
        Sample((to(v((4, 30))), to(_index((4, 30), 8, g))), 1, None, None, "full index"),
        Sample((to(v((4, 30, 3))), to(_index((4, 30), 8, g))), 1, None, None, "broadcast index [B, E]"),
        Sample((to(v((30, 4, 3))), to(_index((30, 1), 8, g))), 0, 9, None, "broadcast index [E, 1]"),
        Sample((to(v((7, 50))).t(), to(_index((100,), 11, g))[::2]), 0, None, None, "non-contiguous"),
        Sample((to(v((2, 3, 33, 2))), to(_index((33,), 5, g))), 2, None, None, "4-D"),
        Sample((to(v((40, 3), ties=True)), to(_index((40,), 6, g))), 0, None, None, "ties"),
        Sample((to(v((50, 7))), to(_index((50,), 11, g))), 0, None, to(out_v((12, 7))), "out="),
        Sample((to(v((50, 7))), to(_index((50,), 11, g))), 0, None, to(out_v((7, 12))).t(), "out= transposed"),
        Sample((to(v((40, 3), ties=True)), to(_index((40,), 6, g))), 0, None,
               to(values((6, 3), dtype, reduce, g, ties=True)), "out= ties"),
        Sample((to(v((0, 3))), to(_index((0,), 4, g))), 0, 4, None, "empty src, dim_size"),
        Sample((to(v((0, 3))), to(_index((0,), 4, g))), 0, None, None, "empty src, default size"),
        Sample((to(v((5, 0))), to(_index((5,), 4, g))), 0, None, None, "empty rows"),
        Sample((to(v((0, 3))), to(_index((0,), 4, g))), 0, None, to(out_v((4, 3))), "empty src, out="),
        Sample((to(v((6, 2))), to(_index((6,), 3, g))), 0, 3, None, "small"),
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
        Sample((v((12, 3)), _index((12,), 5, g).to(device)), 0, 6, None, "1-D index, dim_size"),
        Sample((v((3, 12)), _index((3, 12), 4, g).to(device)), -1, None, None, "full index, dim -1"),
        Sample((v((2, 10, 2)), _index((2, 10), 4, g).to(device)), 1, 4, None, "broadcast index"),
        Sample((v((12, 3)), _index((12,), 5, g).to(device)), 0, None, v((5, 3)), "out="),
    ]


def add_samples(device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
    """add: broadcasting, 0-d, empty, non-contiguous and mixed-dtype operands."""
    def v(shape, dt=dtype):
        if dt.is_floating_point:
            return torch.randn(shape, generator=g, dtype=torch.float64).to(dt).to(device)
        return torch.randint(-20, 20, shape, generator=g).to(dt).to(device)

    return [
        Sample((v((3, 4)), v((4,))), desc="broadcast"),
        Sample((v((3, 1, 4)), v((2, 1))), desc="both broadcast"),
        Sample((v((5,)), v(()),), desc="0-d"),
        Sample((v((4, 3)).t(), v((3, 4))), desc="non-contiguous"),
        Sample((v((0, 4)), v((4,))), desc="empty"),
        Sample((v((2, 3)), v((3,), torch.float32)), desc="promotion"),
    ]


# --------------------------------------------------------------------------- rows

ROWS: list[OpRow] = [
    OpRow("add", "elementwise", ADD_DTYPES, differentiable=(0,), gradgrad=True),
    OpRow("scatter_sum", "scatter", SCATTER_DTYPES, reduce="sum", inplace="scatter_sum_"),
    OpRow("scatter_mean", "scatter", SCATTER_DTYPES, reduce="mean", inplace="scatter_mean_"),
    OpRow("scatter_min", "scatter", SCATTER_DTYPES, reduce="min", inplace="scatter_min_", args=(1,)),
    OpRow("scatter_max", "scatter", SCATTER_DTYPES, reduce="max", inplace="scatter_max_", args=(1,)),
    OpRow("scatter_mul", "scatter", SCATTER_DTYPES, reduce="mul", inplace="scatter_mul_"),
]

BY_NAME = {row.name: row for row in ROWS}
SCATTER_ROWS = [row for row in ROWS if row.kind == "scatter"]


def rows_param(rows: Optional[list[OpRow]] = None) -> list:
    """pytest.param per row, for parametrize("row", ...)."""
    return [row.param for row in (ROWS if rows is None else rows)]


def scatter_rows_param() -> list:
    return rows_param(SCATTER_ROWS)
