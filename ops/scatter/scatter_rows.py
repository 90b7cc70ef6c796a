"""The scatter family's op-table rows (tests/python/op_table.py):
scatter_<reduce>, segment_<reduce>_csr/coo and gather_csr/coo, against the
references of scatter_reference.py and their error bounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

import torchplug
from index_reference import broadcast_index, csr_rows
from op_table import (FLOATS, INTS, OpRow, Sample, ScatterCallRow, assert_bitwise, rand_index, rand_indptr,
                      rand_sorted_index, randint, rows_param, scatter_grad_samples, scatter_samples, values)
from scatter_reference import Reduced, assert_reduced_close, reduce_grad_reference, reduce_reference
from torchplug._reductions import REDUCTIONS

SCATTER_DTYPES = FLOATS + INTS

# test_threads.py's sizes: past the CPU scatter kernel's serial cutoff (2**15
# source elements), so the parallel schedules run too.
THREAD_E, THREAD_F = 12_000, 4  # 48k source elements
THREAD_FEW = 300  # N * 4 <= E: per-thread private outputs
THREAD_MANY = 9_000  # N * 4 > E: each thread owns a range of output rows

#: A segment past CUDA's long-row limit (1024).
LONG_INDPTR = torch.tensor([0, 5, 2500, 3000])


def _cpu(ref: Reduced) -> Reduced:
    return Reduced(*(None if t is None else t.cpu() for t in
                     (ref.value, ref.arg, ref.count, ref.terms, ref.mag)))


def _grad_values(reduce: Optional[str], device: str, g: torch.Generator) -> Callable[[tuple], Tensor]:
    """float64 values for gradcheck: normal, or mul's factors (zeros in some slots)."""
    def v(shape):
        if reduce == "mul":
            return values(shape, torch.float64, reduce, g).to(device)
        return torch.randn(shape, generator=g, dtype=torch.float64).to(device)
    return v


@dataclass
class ReductionRow(OpRow):
    """An op reducing src's slices by one of the table's reductions, checked
    within that reduction's error bound (scatter_reference.assert_reduced_close)."""

    reduce: str = "sum"

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        context = f"{self.name} {sample!r} {context}"
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

    def call_generic(self, sample: Sample, out: Optional[Tensor] = None,
                     fn: Optional[Callable] = None) -> Optional[tuple]:
        fn = self.generic_fn() if fn is None else fn
        return (self.invoke_generic(fn, sample, sample.fresh_out() if out is None else out),)

    def invoke_generic(self, fn: Callable, sample: Sample, out: Optional[Tensor]) -> Tensor:
        """The family's by-name function `fn` on `sample` with this row's reduction."""
        raise NotImplementedError


class ScatterRow(ScatterCallRow, ReductionRow):
    """``scatter_<reduce>(src, index, dim, out, dim_size)``: reduces into out."""

    out_differentiable = True

    def generic_fn(self) -> Callable:
        return torchplug.scatter

    def invoke_generic(self, fn: Callable, sample: Sample, out: Optional[Tensor]) -> Tensor:
        src, index = sample.inputs
        return fn(src, index, sample.dim, out, sample.dim_size, self.reduce)

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        return scatter_samples(self.reduce, device, dtype, torch.Generator().manual_seed(seed))

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        return scatter_grad_samples(self.reduce, device, torch.Generator().manual_seed(seed))

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        g = torch.Generator().manual_seed(seed)
        src = values((E, F), dtype, self.reduce, g).to(device)
        return Sample((src, torch.randint(0, N, (E,), generator=g).to(device)), 0, N)

    def thread_samples(self, seed: int, device: str) -> list[Sample]:
        """One sample per CPU schedule and layout: per-thread private outputs,
        row ownership, a full index (columns), float16 with the default
        dim_size, int64 with a negative dim, a non-contiguous src, a 1-D src,
        out= and a non-contiguous out=."""
        E, F, few_n, many_n = THREAD_E, THREAD_F, THREAD_FEW, THREAD_MANY
        g = torch.Generator().manual_seed(seed)
        v = lambda shape, dtype=torch.float32: values(shape, dtype, self.reduce, g).to(device)  # noqa: E731
        src = v((E, F))
        few = randint(0, few_n, (E,), g, device)
        many = randint(0, many_n, (E,), g, device)
        return [
            Sample((src, few), 0, few_n, None, "private outputs"),
            Sample((src, many), 0, many_n, None, "row ownership"),
            Sample((src, randint(0, few_n, (E, F), g, device)), 0, few_n, None, "full index: columns"),
            Sample((v((E, F), torch.float16), few), 0, None, None, "float16, default dim_size"),
            Sample((v((E, F), torch.int64), many), -2, many_n, None, "int64, dim < 0"),
            Sample((v((F, E)).t(), few), 0, None, None, "non-contiguous src"),
            Sample((src.t(), few), 1, None, None, "non-contiguous src, dim 1"),
            Sample((v((4 * E,), torch.float64), randint(0, 777, (4 * E,), g, device)), -1, None, None, "1-D src"),
            Sample((src, few), 0, None, v((few_n, F)), "out="),
            Sample((v((E, F), torch.float64), many), 0, None, v((F, many_n), torch.float64).t(), "out= via .t()"),
        ]

    def backward_sample(self, g: torch.Generator, seed: int, device: str, E: int, F: int, N: int) -> Sample:
        src = values((E, F), torch.float64, self.reduce, g).to(device)
        return Sample((src, randint(0, N, (E,), g, device)), 0, N)

    def reference(self, sample: Sample) -> Reduced:
        src, index = sample.inputs
        return reduce_reference(src, index, sample.dim, self.reduce, sample.dim_size, sample.out)

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        src, index = sample.inputs
        g_src, g_out = reduce_grad_reference(src, index, sample.dim, self.reduce, grad, sample.out,
                                             sample.dim_size)
        return (g_src,) if g_out is None else (g_src, g_out)


class SegmentRow(ReductionRow):
    """``segment_<reduce>_csr/coo``: the reduced dimension is the last of the
    positions tensor (an indptr, or a sorted index)."""

    #: whether src may run past the last segment (csr: those positions belong to none)
    past_last_segment = False

    def positions(self, index: Tensor, n: int) -> Tensor:
        """The op's positions argument for a sorted 1-D `index` into `n` slots."""
        raise NotImplementedError


class SegmentCsrRow(SegmentRow):
    """``segment_<reduce>_csr(src, indptr, out)``: overwrites out."""

    past_last_segment = True

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(inputs[0], inputs[1], out)

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs

    def inplace_args(self, sample: Sample, out: Tensor) -> tuple:
        return (out,) + sample.inputs

    def generic_fn(self) -> Callable:
        return torchplug.segment_csr

    def invoke_generic(self, fn: Callable, sample: Sample, out: Optional[Tensor]) -> Tensor:
        src, indptr = sample.inputs
        return fn(src, indptr, out, self.reduce)

    def positions(self, index: Tensor, n: int) -> Tensor:
        return torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(index, minlength=n).cumsum(0)])

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        """1-D to 3-D, an indptr shared by the leading dimensions (size 1) or
        one per slice, positions past the last segment, empty segments and
        sources, a segment longer than CUDA's long-row limit (1024),
        non-contiguous src, out=."""
        g = torch.Generator().manual_seed(seed)
        v = lambda shape, ties=False: values(shape, dtype, self.reduce, g, ties).to(device)  # noqa: E731
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((37,)), to(rand_indptr(9, 37, g))), desc="1-D"),
            Sample((v((50, 7)), to(rand_indptr(11, 50, g))), desc="2-D"),
            Sample((v((50, 7)), to(rand_indptr(11, 44, g))), desc="past the last segment"),
            Sample((v((3, 40, 5)), to(rand_indptr(6, 40, g)).view(1, -1)), desc="3-D, indptr [1, N + 1]"),
            Sample((v((3, 40, 2)), to(torch.stack([rand_indptr(6, t, g) for t in (40, 33, 40)]))),
                   desc="indptr per slice [B, N + 1]"),
            Sample((v((7, 50)).t(), to(rand_indptr(11, 50, g))), desc="non-contiguous"),
            Sample((v((40, 3), ties=True), to(rand_indptr(6, 40, g))), desc="ties"),
            Sample((v((3000, 2)), to(LONG_INDPTR)), desc="long segment"),
            Sample((v((50, 7)), to(rand_indptr(11, 50, g))), out=v((11, 7)), desc="out="),
            Sample((v((0, 3)), to(torch.tensor([0, 0, 0]))), desc="empty src"),
            Sample((v((5, 3)), to(torch.tensor([0]))), desc="no segments"),
        ]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        v = _grad_values(self.reduce, device, g)
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((12, 3)), to(rand_indptr(5, 12, g))), desc="2-D"),
            Sample((v((2, 10, 2)), to(torch.stack([rand_indptr(4, 10, g), rand_indptr(4, 8, g)]))),
                   desc="per slice"),
            Sample((v((12, 3)), to(rand_indptr(4, 10, g))), desc="past the last segment"),
        ]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        g = torch.Generator().manual_seed(seed)
        src = values((E, F), dtype, self.reduce, g).to(device)
        return Sample((src, rand_indptr(N, E, g).to(device)), 0)

    def reference(self, sample: Sample) -> Reduced:
        src, indptr = sample.inputs
        rows, n = csr_rows(indptr, src)
        return reduce_reference(src, rows, rows.dim() - 1, self.reduce, n, None,
                                keep=broadcast_index(rows, src, rows.dim() - 1) < n)

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        src, indptr = sample.inputs
        rows, n = csr_rows(indptr, src)
        d = rows.dim() - 1
        pad = list(grad.shape)
        pad[d] = 1
        padded = torch.cat([grad, grad.new_zeros(pad)], d)
        return (reduce_grad_reference(src, rows, d, self.reduce, padded, None, n + 1)[0],)


class SegmentCooRow(SegmentRow):
    """``segment_<reduce>_coo(src, index, out, dim_size)``: scatter along the
    sorted index's last dimension, reducing into out."""

    out_differentiable = True
    size_arg = 2

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(inputs[0], inputs[1], out, sample.dim_size)

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs + (sample.dim_size,)

    def inplace_args(self, sample: Sample, out: Tensor) -> tuple:
        return (out,) + sample.inputs

    def generic_fn(self) -> Callable:
        return torchplug.segment_coo

    def invoke_generic(self, fn: Callable, sample: Sample, out: Optional[Tensor]) -> Tensor:
        src, index = sample.inputs
        return fn(src, index, out, sample.dim_size, self.reduce)

    def positions(self, index: Tensor, n: int) -> Tensor:
        return index

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        """As segment_csr's, over the sorted index (no gaps past the last slot), dim_size."""
        g = torch.Generator().manual_seed(seed)
        v = lambda shape, ties=False: values(shape, dtype, self.reduce, g, ties).to(device)  # noqa: E731
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((37,)), to(rand_sorted_index((37,), 9, g))), desc="1-D"),
            Sample((v((50, 7)), to(rand_sorted_index((50,), 11, g))), dim_size=13, desc="2-D dim_size"),
            Sample((v((3, 40, 5)), to(rand_sorted_index((1, 40), 6, g))), desc="3-D, index [1, E]"),
            Sample((v((3, 40, 2)), to(rand_sorted_index((3, 40), 6, g))), desc="index per slice [B, E]"),
            Sample((v((7, 50)).t(), to(rand_sorted_index((50,), 11, g))), desc="non-contiguous"),
            Sample((v((40, 3), ties=True), to(rand_sorted_index((40,), 6, g))), desc="ties"),
            Sample((v((3000, 2)), to(torch.repeat_interleave(torch.arange(3), torch.tensor([5, 2495, 500])))),
                   desc="long run"),
            Sample((v((50, 7)), to(rand_sorted_index((50,), 11, g))), out=v((12, 7)), desc="out="),
            Sample((v((0, 3)), to(rand_sorted_index((0,), 4, g))), dim_size=4, desc="empty src"),
        ]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        v = _grad_values(self.reduce, device, g)
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((12, 3)), to(rand_sorted_index((12,), 5, g))), dim_size=6, desc="2-D dim_size"),
            Sample((v((2, 10, 2)), to(rand_sorted_index((2, 10), 4, g))), dim_size=4, desc="per slice"),
            Sample((v((12, 3)), to(rand_sorted_index((12,), 5, g))), out=v((5, 3)), desc="out="),
        ]

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        g = torch.Generator().manual_seed(seed)
        src = values((E, F), dtype, self.reduce, g).to(device)
        return Sample((src, rand_sorted_index((E,), N, g).to(device)), 0, N)

    def reference(self, sample: Sample) -> Reduced:
        src, index = sample.inputs
        return reduce_reference(src, index, index.dim() - 1, self.reduce, sample.dim_size, sample.out)

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        src, index = sample.inputs
        g_src, g_out = reduce_grad_reference(src, index, index.dim() - 1, self.reduce, grad, sample.out,
                                             sample.dim_size)
        return (g_src,) if g_out is None else (g_src, g_out)


class GatherRow(OpRow):
    """``gather_csr/coo(src, positions, out)``: copies, so exact."""

    def invoke(self, fn: Callable, inputs: tuple, sample: Sample, out: Optional[Tensor]):
        return fn(inputs[0], inputs[1], out)

    def inplace_args(self, sample: Sample, out: Tensor) -> tuple:
        return (out,) + sample.inputs

    def rows(self, positions: Tensor, src: Tensor, E: int) -> tuple[Tensor, int]:
        """(the slice of src each of E output positions copies, the number of slices)."""
        raise NotImplementedError

    def large_sample(self, dtype: torch.dtype, device, seed: int, E: int = 20000, F: int = 32,
                     N: int = 500) -> Sample:
        g = torch.Generator().manual_seed(seed)
        src = values((N, F), dtype, None, g).to(device)
        return Sample((src, self.large_positions(N, E, g).to(device)), 0)

    def large_positions(self, N: int, E: int, g: torch.Generator) -> Tensor:
        """The positions of large_sample: E of them over N slices."""
        raise NotImplementedError

    def reference(self, sample: Sample) -> Tensor:
        """Each output position holds its segment's (csr) or index value's
        (coo) slice of src, 0 where none."""
        src, positions = sample.inputs
        d = positions.dim() - 1
        rows, n = self.rows(positions, src, self.output_size(positions, sample.out))
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

    def output_size(self, positions: Tensor, out: Optional[Tensor]) -> int:
        """E: out's size, or what the positions give."""
        raise NotImplementedError

    def check(self, outputs: tuple, sample: Sample, context: str = "", values_only: bool = False) -> None:
        assert_bitwise(outputs[0], self.reference(sample), f"{self.name} {sample!r} {context}")

    def grad_reference(self, sample: Sample, grad: Tensor) -> tuple[Tensor, ...]:
        src, positions = sample.inputs
        d = positions.dim() - 1
        rows, _ = self.rows(positions, src, grad.size(d))
        full = broadcast_index(rows, grad, d)
        keep = (full >= 0) & (full < src.size(d))
        g_src = torch.zeros(src.shape, dtype=torch.float64, device=src.device)
        g_src.scatter_add_(d, full.clamp(0, max(src.size(d) - 1, 0)), torch.where(keep, grad.to(torch.float64), 0.0))
        return (g_src,)


class GatherCsrRow(GatherRow):
    size_arg = 2

    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs + (None,)

    def rows(self, positions: Tensor, src: Tensor, E: int) -> tuple[Tensor, int]:
        return csr_rows(positions, src, E)

    def output_size(self, positions: Tensor, out: Optional[Tensor]) -> int:
        if out is not None:
            return out.size(positions.dim() - 1)
        return int(positions.reshape(-1)[-1]) if positions.numel() else 0

    def large_positions(self, N: int, E: int, g: torch.Generator) -> Tensor:
        return rand_indptr(N, E, g)

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        v = lambda shape: values(shape, dtype, None, g).to(device)  # noqa: E731
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((9,)), to(rand_indptr(9, 37, g))), desc="1-D"),
            Sample((v((11, 7)), to(rand_indptr(11, 50, g))), desc="2-D"),
            Sample((v((3, 6, 5)), to(rand_indptr(6, 40, g)).view(1, -1)), desc="3-D, indptr [1, N + 1]"),
            Sample((v((3, 6, 2)), to(torch.stack([rand_indptr(6, t, g) for t in (33, 40, 40)]))),
                   desc="indptr per slice [B, N + 1]"),
            Sample((v((7, 11)).t(), to(rand_indptr(11, 50, g))), desc="non-contiguous"),
            Sample((v((3, 2)), to(LONG_INDPTR)), desc="long segment"),
            Sample((v((11, 7)), to(rand_indptr(11, 44, g))), out=v((50, 7)), desc="out= past the last segment"),
            Sample((v((0, 3)), to(torch.tensor([0]))), desc="empty"),
        ]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        v = _grad_values(None, device, g)
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((5, 3)), to(rand_indptr(5, 12, g))), desc="2-D"),
            Sample((v((2, 4, 2)), to(torch.stack([rand_indptr(4, 10, g), rand_indptr(4, 10, g)]))),
                   desc="per slice"),
        ]


class GatherCooRow(GatherRow):
    def functional_args(self, sample: Sample) -> tuple:
        return sample.inputs

    def rows(self, positions: Tensor, src: Tensor, E: int) -> tuple[Tensor, int]:
        return positions, src.size(positions.dim() - 1)

    def output_size(self, positions: Tensor, out: Optional[Tensor]) -> int:
        return positions.size(-1)

    def large_positions(self, N: int, E: int, g: torch.Generator) -> Tensor:
        return rand_index((E,), N, g)

    def samples(self, device: str, dtype: torch.dtype, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        v = lambda shape: values(shape, dtype, None, g).to(device)  # noqa: E731
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((9,)), to(rand_index((37,), 9, g))), desc="1-D"),
            Sample((v((11, 7)), to(rand_index((50,), 11, g))), desc="2-D"),
            Sample((v((3, 6, 5)), to(rand_index((1, 40), 6, g))), desc="3-D, index [1, E]"),
            Sample((v((3, 6, 2)), to(rand_index((3, 40), 6, g))), desc="index per slice [B, E]"),
            Sample((v((7, 11)).t(), to(rand_index((50,), 11, g))), desc="non-contiguous"),
            Sample((v((11, 7)), to(rand_index((50,), 11, g))), out=v((50, 7)), desc="out="),
            Sample((v((4, 3)), to(rand_index((0,), 4, g))), desc="empty index"),
        ]

    def grad_samples(self, device: str, seed: int = 0) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        v = _grad_values(None, device, g)
        to = lambda t: t.to(device)  # noqa: E731
        return [
            Sample((v((5, 3)), to(rand_index((12,), 5, g))), desc="2-D"),
            Sample((v((2, 4, 2)), to(rand_index((2, 10), 4, g))), desc="per slice"),
        ]


SCATTER_ROWS: list[ScatterRow] = [
    ScatterRow(f"scatter_{r.name}", SCATTER_DTYPES, reduce=r.name, inplace=f"scatter_{r.name}_",
               args=(1,) if r.arg else ())
    for r in REDUCTIONS
]
SEGMENT_ROWS: list[SegmentRow] = [
    cls(f"segment_{r.name}_{form}", SCATTER_DTYPES, reduce=r.name, inplace=f"segment_{r.name}_{form}_",
        args=(1,) if r.arg else ())
    for form, cls in (("csr", SegmentCsrRow), ("coo", SegmentCooRow)) for r in REDUCTIONS
]
ROWS: list[OpRow] = SCATTER_ROWS + SEGMENT_ROWS + [
    GatherCsrRow("gather_csr", SCATTER_DTYPES, inplace="gather_csr_"),
    GatherCooRow("gather_coo", SCATTER_DTYPES, inplace="gather_coo_"),
]


def scatter_rows_param() -> list:
    """pytest.param per scatter_<reduce> row."""
    return rows_param(SCATTER_ROWS)
