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

import composite_reference
import torchplug
from spmm_reference import spmm_reference
from scatter_reference import (Reduced, assert_reduced_close, broadcast_index, reduce_grad_reference,
                               reduce_reference)

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
    #: "elementwise", "scatter", "segment_csr", "segment_coo", "gather_csr", "gather_coo", a
    #: composite: "softmax" (a value per source), "softmax_csr", "composite" (a value per group),
    #: or "spmm" (inputs (x, rowptr, col, value); extra["reduce"] names the reduction)
    kind: str
    dtypes: tuple
    #: positions of the outputs autograd differentiates; of the int64 arg outputs
    differentiable: tuple = (0,)
    args: tuple = ()
    reduce: Optional[str] = None  # scatter ops: torchplug.scatter(reduce=...)
    gradgrad: bool = True
    #: gradcheck's tolerance for run-to-run differences of the gradient on
    #: CUDA: the composites' backward sums each group in the order of a
    #: counting sort (the scatter family's backward is a gather: exact)
    cuda_nondet_tol: float = 0.0
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

    @property
    def leaf_count(self) -> int:
        """How many leading inputs are differentiable (add: a and b; else src)."""
        return 2 if self.kind == "elementwise" else 1

    @property
    def out_differentiable(self) -> bool:
        """Whether out='s initial value takes part and gets a gradient (the
        ops that reduce into out); the others overwrite out, and their out=
        form is not differentiable."""
        return self.kind in ("scatter", "segment_coo")

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
        if self.kind == "elementwise":
            result = fn(*inputs)
        elif self.kind in ("scatter", "composite"):
            result = fn(inputs[0], inputs[1], sample.dim, out, sample.dim_size)
        elif self.kind == "softmax":
            result = fn(inputs[0], inputs[1], sample.dim, sample.dim_size)
        elif self.kind == "softmax_csr":
            result = fn(inputs[0], inputs[1], sample.dim)
        elif self.kind == "spmm":
            x, rowptr, col, value = inputs
            result = fn(rowptr, col, value, x)
        elif self.kind == "segment_coo":
            result = fn(inputs[0], inputs[1], out, sample.dim_size)
        else:  # segment_csr, gather_csr, gather_coo
            result = fn(inputs[0], inputs[1], out)
        return tuple(result) if isinstance(result, (tuple, list)) else (result,)

    def call_schema(self, sample: Sample, out: Optional[Tensor] = None) -> tuple:
        """The schema-level ops: the functional one without out=, the in-place
        one (returning out and, for ops with an arg, the arg it returns) with."""
        if self.kind == "elementwise" or sample.out is None:
            op, args = self.schema_args(sample)
            result = op(*args)
            return tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if out is None:
            out = sample.fresh_out()
        op, args = self.schema_args(sample, out)
        result = op(*args)
        if self.args:
            return (out, result)
        assert result is None, f"{self.inplace} returned {type(result)}"
        return (out,)

    def generic_fn(self) -> Optional[Callable]:
        """The family's function by name with reduce= (torchplug.scatter,
        segment_csr, segment_coo); None for ops without one."""
        if self.reduce is None:
            return None
        return {"scatter": torchplug.scatter, "segment_csr": torchplug.segment_csr,
                "segment_coo": torchplug.segment_coo}[self.kind]

    def call_generic(self, sample: Sample, out: Optional[Tensor] = None,
                     fn: Optional[Callable] = None) -> Optional[tuple]:
        """generic_fn (or `fn`, e.g. its scripted form) with reduce=row.reduce:
        only the values, as for min/max; None for ops without one."""
        fn = self.generic_fn() if fn is None else fn
        if fn is None:
            return None
        if out is None:
            out = sample.fresh_out()
        src, positions = sample.inputs
        if self.kind == "segment_csr":
            return (fn(src, positions, out, self.reduce),)
        if self.kind == "segment_coo":
            return (fn(src, positions, out, sample.dim_size, self.reduce),)
        return (fn(src, positions, sample.dim, out, sample.dim_size, self.reduce),)

    def sizes_from_data(self, op, args: tuple) -> bool:
        """Whether the schema call `op(*args)` sizes its output by the values
        of its index or indptr (no dim_size given)."""
        sized = {"scatter": 3, "composite": 3, "segment_coo": 2, "gather_csr": 2}.get(self.kind)
        return op == self.op() and sized is not None and args[sized] is None

    def schema_args(self, sample: Sample, out: Optional[Tensor] = None) -> tuple[object, tuple]:
        """(op overload, args) of the schema call (for opcheck): the functional
        schema, or for a sample with out= the in-place one (into `out`, else a
        fresh copy of the sample's)."""
        if self.kind == "elementwise":
            return self.op(), sample.inputs
        if self.kind == "spmm":
            x, rowptr, col, value = sample.inputs
            return self.op(), (rowptr, col, value, x)
        src, positions = sample.inputs
        if sample.out is None:
            extra = {"scatter": (sample.dim, sample.dim_size), "composite": (sample.dim, sample.dim_size),
                     "softmax": (sample.dim, sample.dim_size), "softmax_csr": (sample.dim,),
                     "segment_coo": (sample.dim_size,), "gather_csr": (None,)}.get(self.kind, ())
            return self.op(), (src, positions) + extra
        out = sample.fresh_out() if out is None else out
        extra = (sample.dim,) if self.kind in ("scatter", "composite") else ()
        return self.inplace_op(), (out, src, positions) + extra

    # ------------------------------------------------------------------ samples
    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        """A sample big enough for every CUDA strategy's parallel paths: E
        positions of F values and N slots (add: a broadcast pair of E x F and F)."""
        g = torch.Generator().manual_seed(seed)
        if self.kind == "elementwise":
            return Sample((values((E, F), dtype, None, g).to(device), values((F,), dtype, None, g).to(device)))
        if self.kind == "spmm":
            return spmm_sample(N, N, E, (F,), 0, dtype, device, g)
        if self.kind in ("gather_csr", "gather_coo"):
            src = values((N, F), dtype, None, g).to(device)
            positions = _indptr(N, E, g) if self.kind == "gather_csr" else _index((E,), N, g)
            return Sample((src, positions.to(device)), 0)
        src = values((E, F), dtype, self.reduce, g).to(device)
        if self.kind == "softmax_csr":
            return Sample((src, _indptr(N, E, g).to(device)), 0)
        if self.kind in COMPOSITE_KINDS:
            return Sample((src, torch.randint(0, N, (E,), generator=g).to(device)), 0, N)
        if self.kind == "segment_csr":
            return Sample((src, _indptr(N, E, g).to(device)), 0)
        if self.kind == "segment_coo":
            return Sample((src, _sorted_index((E,), N, g).to(device)), 0, N)
        return Sample((src, torch.randint(0, N, (E,), generator=g).to(device)), 0, N)

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        if self.kind == "elementwise":
            return add_samples(device, dtype, g)
        if self.kind == "scatter":
            return scatter_samples(self.reduce, device, dtype, g)
        if self.kind in COMPOSITE_KINDS:
            return composite_samples(self, device, dtype, g)
        if self.kind == "spmm":
            return spmm_samples(device, dtype, g)
        return segment_samples(self.kind, self.reduce, device, dtype, g)

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        """float64 samples for gradcheck: non-empty, distinct values (min/max
        are not differentiable at ties), mul with zeros in some slots."""
        g = torch.Generator().manual_seed(seed)
        if self.kind == "elementwise":
            return [s for s in add_samples(device, torch.float64, g)
                    if all(t.dtype == torch.float64 for t in s.inputs)]
        if self.kind == "scatter":
            return scatter_grad_samples(self.reduce, device, g)
        if self.kind in COMPOSITE_KINDS:
            return composite_grad_samples(self.kind, device, g)
        if self.kind == "spmm":
            return [spmm_sample(12, 9, 40, (3,), 0, torch.float64, device, g),
                    spmm_sample(6, 8, 20, (2, 2), 1500, torch.float64, device, g)]
        return segment_grad_samples(self.kind, self.reduce, device, g)

    # ------------------------------------------------------------------ reference
    def reference(self, sample: Sample):
        """Add: ``a + b``; scatter: a scatter_reference.Reduced."""
        if self.kind == "elementwise":
            a, b = sample.inputs
            return a + b
        if self.kind == "spmm":
            x, rowptr, col, value = sample.inputs
            return spmm_reference(rowptr, col, value, x, self.extra["reduce"])
        src, positions = sample.inputs
        if self.kind in COMPOSITE_KINDS:
            return self.composite_reference(src, positions, sample)
        if self.kind in ("gather_csr", "gather_coo"):
            return gather_reference(self.kind, src, positions, sample.out)
        if self.kind == "segment_csr":
            rows, n = csr_rows(positions, src)
            return reduce_reference(src, rows, rows.dim() - 1, self.reduce, n, None,
                                    keep=broadcast_index(rows, src, rows.dim() - 1) < n)
        if self.kind == "segment_coo":
            return reduce_reference(src, positions, positions.dim() - 1, self.reduce, sample.dim_size,
                                    sample.out)
        return reduce_reference(src, positions, sample.dim, self.reduce, sample.dim_size, sample.out)

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        """The outputs of a call on `sample` against the reference, within
        the row's tolerance rule (scatter_reference.assert_reduced_close;
        add and every arg: exact)."""
        context = f"{self.name} {sample!r} {context}"
        if self.kind == "spmm":
            x = sample.inputs[0]
            want, want_arg = self.reference(sample)
            got = outputs[0]
            assert got.dtype == x.dtype and got.device == x.device and got.shape == want.shape, context
            rtol, atol = composite_reference.TOLERANCE[x.dtype]
            torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{context}\n{m}")
            if values_only:
                return
            assert len(outputs) == 1 + len(self.args), context
            if self.args and x.dtype == torch.float64:  # float32 products may round a near tie apart
                torch.testing.assert_close(outputs[1].cpu(), want_arg, rtol=0, atol=0,
                                           msg=lambda m: f"{context}: arg\n{m}")
            return
        if self.kind in COMPOSITE_KINDS:
            src = sample.inputs[0]
            got = outputs[0]
            ref = self.reference(sample)
            assert got.dtype == src.dtype and got.device == src.device and got.shape == ref.shape, context
            rtol, atol = composite_reference.TOLERANCE[src.dtype]
            torch.testing.assert_close(got.double().cpu(), ref.cpu(), rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{context}\n{m}")
            return
        if self.kind in ("elementwise", "gather_csr", "gather_coo"):
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
        if self.kind == "spmm":
            x, rowptr, col, value = sample.inputs
            leaf = x.detach().double().requires_grad_()
            return torch.autograd.grad(spmm_reference(rowptr, col, value, leaf, self.extra["reduce"])[0], leaf,
                                       grad.double())
        src, positions = sample.inputs
        if self.kind in COMPOSITE_KINDS:
            leaf = src.detach().double().requires_grad_()
            value = self.composite_reference(leaf, positions, sample)
            return torch.autograd.grad(value, leaf, grad.double())
        if self.kind in ("gather_csr", "gather_coo"):
            rows, _ = csr_rows(positions, src, grad.size(positions.dim() - 1)) if self.kind == "gather_csr" \
                else (positions, None)
            d = positions.dim() - 1
            full = broadcast_index(rows, grad, d)
            keep = (full >= 0) & (full < src.size(d))
            g_src = torch.zeros(src.shape, dtype=torch.float64, device=src.device)
            g_src.scatter_add_(d, full.clamp(0, max(src.size(d) - 1, 0)),
                               torch.where(keep, grad.to(torch.float64), 0.0))
            return (g_src,)
        if self.kind == "segment_csr":
            rows, n = csr_rows(positions, src)
            d = rows.dim() - 1
            pad = list(grad.shape)
            pad[d] = 1
            padded = torch.cat([grad, grad.new_zeros(pad)], d)
            return (reduce_grad_reference(src, rows, d, self.reduce, padded, None, n + 1)[0],)
        dim = positions.dim() - 1 if self.kind == "segment_coo" else sample.dim
        g_src, g_out = reduce_grad_reference(src, positions, dim, self.reduce, grad, sample.out,
                                             sample.dim_size)
        return (g_src,) if g_out is None else (g_src, g_out)

    def composite_reference(self, src: Tensor, positions: Tensor, sample: Sample) -> Tensor:
        """The composite's float64 value (composite_reference), from `src`
        (differentiable) and the sample's index or indptr."""
        if self.kind == "softmax_csr":
            rows, n = csr_rows(positions, src, src.size(sample.dim))
            return composite_reference.softmax(src, rows.view(-1), sample.dim, n)
        if self.kind == "softmax":
            return composite_reference.softmax(src, positions, sample.dim, sample.dim_size,
                                               log=self.extra.get("log", False))
        if self.name == "scatter_logsumexp":
            return composite_reference.logsumexp(src, positions, sample.dim, sample.dim_size, sample.out)
        return composite_reference.std(src, positions, sample.dim, sample.dim_size)


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


def csr_rows(indptr: Tensor, src: Tensor, positions: Optional[int] = None) -> tuple[Tensor, int]:
    """(rows, N): the segment of each of `positions` (src.size(dim) by
    default) by indptr ([..., N + 1], leading sizes src's or 1), N past the last
    segment; rows is [src's leading sizes..., positions], on indptr's device."""
    d = indptr.dim() - 1
    n = max(indptr.size(-1) - 1, 0)
    E = src.size(d) if positions is None else positions
    lead = list(src.shape[:d])
    flat = indptr.expand(lead + [indptr.size(-1)]).reshape(-1, indptr.size(-1)).cpu()
    rows = []
    for bounds in flat:
        row = torch.repeat_interleave(torch.arange(n), bounds.diff()) if n > 0 else torch.zeros(0, dtype=torch.long)
        rows.append(torch.cat([row, torch.full((E - row.numel(),), n)]))
    return torch.stack(rows).view(lead + [E]).to(indptr.device), n


def gather_reference(kind: str, src: Tensor, positions: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """gather_csr / gather_coo in plain PyTorch: each output position holds its
    segment's (csr) or index value's (coo) slice of src, 0 where none."""
    d = positions.dim() - 1
    if kind == "gather_csr":
        E = out.size(d) if out is not None else (int(positions.reshape(-1)[-1]) if positions.numel() else 0)
        rows, n = csr_rows(positions, src, E)
    else:
        rows, n = positions, src.size(d)
    shape = list(src.shape)
    shape[d] = rows.size(-1)
    full = rows
    while full.dim() < src.dim():
        full = full.unsqueeze(-1)
    full = full.expand(shape)
    pad = list(src.shape)
    pad[d] = 1
    padded = torch.cat([src, src.new_zeros(pad)], d)
    return padded.gather(d, torch.where((full >= 0) & (full < n), full, n))


def _indptr(segments: int, total: int, g: torch.Generator) -> Tensor:
    """[segments + 1] from 0 to `total`, empty segments now and then."""
    cuts = torch.randint(0, total + 1, (max(segments - 1, 0),), generator=g).sort().values
    return torch.cat([torch.tensor([0]), cuts, torch.tensor([total])]) if segments > 0 else torch.tensor([0])


def _sorted_index(shape, n: int, g: torch.Generator) -> Tensor:
    return _index(shape, n, g).sort(dim=-1).values


def segment_samples(kind: str, reduce: Optional[str], device: str, dtype: torch.dtype,
                    g: torch.Generator) -> list[Sample]:
    """The shape classes of the segment and gather ops: 1-D to 3-D, an indptr
    or index shared by the leading dimensions (size 1) or one per slice,
    positions past the last segment, empty segments and sources, a segment
    longer than CUDA's long-row limit (1024), non-contiguous src, out=."""
    v = lambda shape, ties=False: values(shape, dtype, reduce, g, ties).to(device)  # noqa: E731
    to = lambda t: t.to(device)  # noqa: E731
    long_indptr = to(torch.tensor([0, 5, 2500, 3000]))
    if kind == "segment_csr":
        return [
            Sample((v((37,)), to(_indptr(9, 37, g))), desc="1-D"),
            Sample((v((50, 7)), to(_indptr(11, 50, g))), desc="2-D"),
            Sample((v((50, 7)), to(_indptr(11, 44, g))), desc="past the last segment"),
            Sample((v((3, 40, 5)), to(_indptr(6, 40, g)).view(1, -1)), desc="3-D, indptr [1, N + 1]"),
            Sample((v((3, 40, 2)), to(torch.stack([_indptr(6, t, g) for t in (40, 33, 40)]))),
                   desc="indptr per slice [B, N + 1]"),
            Sample((v((7, 50)).t(), to(_indptr(11, 50, g))), desc="non-contiguous"),
            Sample((v((40, 3), ties=True), to(_indptr(6, 40, g))), desc="ties"),
            Sample((v((3000, 2)), long_indptr), desc="long segment"),
            Sample((v((50, 7)), to(_indptr(11, 50, g))), out=v((11, 7)), desc="out="),
            Sample((v((0, 3)), to(torch.tensor([0, 0, 0]))), desc="empty src"),
            Sample((v((5, 3)), to(torch.tensor([0]))), desc="no segments"),
        ]
    if kind == "segment_coo":
        return [
            Sample((v((37,)), to(_sorted_index((37,), 9, g))), desc="1-D"),
            Sample((v((50, 7)), to(_sorted_index((50,), 11, g))), dim_size=13, desc="2-D dim_size"),
            Sample((v((3, 40, 5)), to(_sorted_index((1, 40), 6, g))), desc="3-D, index [1, E]"),
            Sample((v((3, 40, 2)), to(_sorted_index((3, 40), 6, g))), desc="index per slice [B, E]"),
            Sample((v((7, 50)).t(), to(_sorted_index((50,), 11, g))), desc="non-contiguous"),
            Sample((v((40, 3), ties=True), to(_sorted_index((40,), 6, g))), desc="ties"),
            Sample((v((3000, 2)), to(torch.repeat_interleave(torch.arange(3), torch.tensor([5, 2495, 500])))),
                   desc="long run"),
            Sample((v((50, 7)), to(_sorted_index((50,), 11, g))), out=v((12, 7)), desc="out="),
            Sample((v((0, 3)), to(_sorted_index((0,), 4, g))), dim_size=4, desc="empty src"),
        ]
    if kind == "gather_coo":
        return [
            Sample((v((9,)), to(_index((37,), 9, g))), desc="1-D"),
            Sample((v((11, 7)), to(_index((50,), 11, g))), desc="2-D"),
            Sample((v((3, 6, 5)), to(_index((1, 40), 6, g))), desc="3-D, index [1, E]"),
            Sample((v((3, 6, 2)), to(_index((3, 40), 6, g))), desc="index per slice [B, E]"),
            Sample((v((7, 11)).t(), to(_index((50,), 11, g))), desc="non-contiguous"),
            Sample((v((11, 7)), to(_index((50,), 11, g))), out=v((50, 7)), desc="out="),
            Sample((v((4, 3)), to(_index((0,), 4, g))), desc="empty index"),
        ]
    return [  # gather_csr
        Sample((v((9,)), to(_indptr(9, 37, g))), desc="1-D"),
        Sample((v((11, 7)), to(_indptr(11, 50, g))), desc="2-D"),
        Sample((v((3, 6, 5)), to(_indptr(6, 40, g)).view(1, -1)), desc="3-D, indptr [1, N + 1]"),
        Sample((v((3, 6, 2)), to(torch.stack([_indptr(6, t, g) for t in (33, 40, 40)]))),
               desc="indptr per slice [B, N + 1]"),
        Sample((v((7, 11)).t(), to(_indptr(11, 50, g))), desc="non-contiguous"),
        Sample((v((3, 2)), long_indptr), desc="long segment"),
        Sample((v((11, 7)), to(_indptr(11, 44, g))), out=v((50, 7)), desc="out= past the last segment"),
        Sample((v((0, 3)), to(torch.tensor([0]))), desc="empty"),
    ]


def segment_grad_samples(kind: str, reduce: Optional[str], device: str, g: torch.Generator) -> list[Sample]:
    """float64 samples for gradcheck (see OpRow.grad_samples)."""
    f64 = torch.float64

    def v(shape):
        if reduce == "mul":
            return values(shape, f64, reduce, g).to(device)
        return torch.randn(shape, generator=g, dtype=f64).to(device)

    to = lambda t: t.to(device)  # noqa: E731
    if kind == "segment_csr":
        return [
            Sample((v((12, 3)), to(_indptr(5, 12, g))), desc="2-D"),
            Sample((v((2, 10, 2)), to(torch.stack([_indptr(4, 10, g), _indptr(4, 8, g)]))), desc="per slice"),
            Sample((v((12, 3)), to(_indptr(4, 10, g))), desc="past the last segment"),
        ]
    if kind == "segment_coo":
        return [
            Sample((v((12, 3)), to(_sorted_index((12,), 5, g))), dim_size=6, desc="2-D dim_size"),
            Sample((v((2, 10, 2)), to(_sorted_index((2, 10), 4, g))), dim_size=4, desc="per slice"),
            Sample((v((12, 3)), to(_sorted_index((12,), 5, g))), out=v((5, 3)), desc="out="),
        ]
    if kind == "gather_coo":
        return [
            Sample((v((5, 3)), to(_index((12,), 5, g))), desc="2-D"),
            Sample((v((2, 4, 2)), to(_index((2, 10), 4, g))), desc="per slice"),
        ]
    return [  # gather_csr
        Sample((v((5, 3)), to(_indptr(5, 12, g))), desc="2-D"),
        Sample((v((2, 4, 2)), to(torch.stack([_indptr(4, 10, g), _indptr(4, 10, g)]))), desc="per slice"),
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


COMPOSITE_KINDS = ("softmax", "softmax_csr", "composite")


def composite_samples(row: OpRow, device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
    """The scatter shape classes for the index composites (out= only where the
    op has an in-place form: logsumexp), and 1-D indptr classes for softmax_csr:
    dims 0, 1 and -1, non-contiguous src, a segment past CUDA's long-row limit,
    empty segments and sources."""
    if row.kind != "softmax_csr":
        return [s for s in scatter_samples(None, device, dtype, g) if s.out is None or row.inplace]
    v = lambda shape: values(shape, dtype, None, g).to(device)  # noqa: E731
    to = lambda t: t.to(device)  # noqa: E731
    return [
        Sample((v((37,)), to(_indptr(9, 37, g))), 0, desc="1-D"),
        Sample((v((50, 7)), to(_indptr(11, 50, g))), 0, desc="2-D"),
        Sample((v((3, 40, 5)), to(_indptr(6, 40, g))), 1, desc="3-D dim 1"),
        Sample((v((4, 30)), to(_indptr(5, 30, g))), -1, desc="dim -1"),
        Sample((v((7, 50)).t(), to(_indptr(11, 50, g))), 0, desc="non-contiguous"),
        Sample((v((3000, 2)), to(torch.tensor([0, 5, 2500, 3000]))), 0, desc="long segment"),
        Sample((v((0, 3)), to(torch.tensor([0, 0, 0]))), 0, desc="empty src"),
    ]


def composite_grad_samples(kind: str, device: str, g: torch.Generator) -> list[Sample]:
    """float64 samples for gradcheck: scatter's without out=, or indptr ones."""
    if kind != "softmax_csr":
        return [s for s in scatter_grad_samples(None, device, g) if s.out is None]
    v = lambda shape: torch.randn(shape, generator=g, dtype=torch.float64).to(device)  # noqa: E731
    return [
        Sample((v((12, 3)), _indptr(5, 12, g).to(device)), 0, desc="2-D"),
        Sample((v((2, 10, 2)), _indptr(4, 10, g).to(device)), 1, desc="dim 1"),
    ]


def spmm_sample(M: int, N: int, nnz: int, shape: tuple, hub: int, dtype: torch.dtype, device: str,
                g: torch.Generator) -> Sample:
    """spmm's inputs (x [N, *shape], rowptr, col, value): nnz random edges
    over M rows, `hub` more in row 0 (past CUDA's long-row limit)."""
    rows = torch.randint(0, max(M, 1), (nnz,), generator=g) if M > 0 else torch.zeros(0, dtype=torch.long)
    rows = torch.cat([torch.zeros(hub if M > 0 else 0, dtype=torch.long), rows]).sort().values
    col = torch.randint(0, N, (rows.numel(),), generator=g)
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows, minlength=M).cumsum(0)])
    x = values((N,) + shape, dtype, None, g)
    value = values((rows.numel(),), dtype, None, g)
    return Sample(tuple(t.to(device) for t in (x, rowptr, col, value)), 0, desc=f"M={M} N={N} nnz={rows.numel()}")


def spmm_samples(device: str, dtype: torch.dtype, g: torch.Generator) -> list[Sample]:
    """Rows of one to many edges and empty ones, x of 1 to 3 dimensions, a hub
    row past CUDA's long-row limit, no edges, no rows."""
    return [
        spmm_sample(30, 20, 90, (5,), 0, dtype, device, g),
        spmm_sample(25, 40, 60, (), 0, dtype, device, g),
        spmm_sample(10, 7, 40, (3, 4), 0, dtype, device, g),
        spmm_sample(6, 2500, 50, (4,), 3000, dtype, device, g),
        spmm_sample(12, 9, 0, (4,), 0, dtype, device, g),
        spmm_sample(0, 5, 0, (3,), 0, dtype, device, g),
    ]


# --------------------------------------------------------------------------- rows

ROWS: list[OpRow] = [
    OpRow("add", "elementwise", ADD_DTYPES, differentiable=(0,), gradgrad=True),
    OpRow("scatter_sum", "scatter", SCATTER_DTYPES, reduce="sum", inplace="scatter_sum_"),
    OpRow("scatter_mean", "scatter", SCATTER_DTYPES, reduce="mean", inplace="scatter_mean_"),
    OpRow("scatter_min", "scatter", SCATTER_DTYPES, reduce="min", inplace="scatter_min_", args=(1,)),
    OpRow("scatter_max", "scatter", SCATTER_DTYPES, reduce="max", inplace="scatter_max_", args=(1,)),
    OpRow("scatter_mul", "scatter", SCATTER_DTYPES, reduce="mul", inplace="scatter_mul_"),
] + [
    OpRow(f"segment_{reduce}_{form}", f"segment_{form}", SCATTER_DTYPES, reduce=reduce,
          inplace=f"segment_{reduce}_{form}_", args=(1,) if reduce in ("min", "max") else ())
    for form in ("csr", "coo") for reduce in ("sum", "mean", "mul", "min", "max")
] + [
    OpRow("gather_csr", "gather_csr", SCATTER_DTYPES, inplace="gather_csr_"),
    OpRow("gather_coo", "gather_coo", SCATTER_DTYPES, inplace="gather_coo_"),
    OpRow("scatter_softmax", "softmax", FLOATS, cuda_nondet_tol=1e-12),
    OpRow("scatter_log_softmax", "softmax", FLOATS, extra={"log": True}, cuda_nondet_tol=1e-12),
    OpRow("softmax_csr", "softmax_csr", FLOATS, cuda_nondet_tol=1e-12),
    OpRow("scatter_logsumexp", "composite", FLOATS, inplace="scatter_logsumexp_", cuda_nondet_tol=1e-12),
    OpRow("scatter_std", "composite", FLOATS, cuda_nondet_tol=1e-12),
] + [
    OpRow(f"spmm_{reduce}", "spmm", FLOATS, args=(1,) if reduce in ("min", "max") else (),
          extra={"reduce": reduce})
    for reduce in ("sum", "mean", "min", "max")
]

BY_NAME = {row.name: row for row in ROWS}
SCATTER_ROWS = [row for row in ROWS if row.kind == "scatter"]


def rows_param(rows: Optional[list[OpRow]] = None) -> list:
    """pytest.param per row, for parametrize("row", ...)."""
    return [row.param for row in (ROWS if rows is None else rows)]


def scatter_rows_param() -> list:
    return rows_param(SCATTER_ROWS)
