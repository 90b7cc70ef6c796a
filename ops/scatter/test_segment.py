"""segment_csr, segment_coo, gather_csr and gather_coo beyond the op table
(tests/python/op_table.py, which checks every shape class against plain
PyTorch): torch.segment_reduce as a second reference, malformed indptr and
unsorted index errors, the ordered long segments of the CUDA kernels, the
inverse relations of segments and gathers, and the out= forms."""

from __future__ import annotations

import math
from typing import Optional

import pytest
import torch

import torchplug
from op_table import DET_E, DET_N, OpRow, Sample, assert_bitwise, det_index, deterministic_algorithms, rows_param, values
from scatter_reference import assert_reduced_close, reduce_reference
from scatter_rows import ROWS, SEGMENT_ROWS
from test_scatter import assert_deterministic_runs, forward_backward

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
SEGMENT_REDUCE = {"sum": "sum", "mean": "mean", "min": "min", "max": "max"}
CSR_ROWS = [row for row in SEGMENT_ROWS if row.name.endswith("_csr")]
COO_ROWS = [row for row in SEGMENT_ROWS if row.name.endswith("_coo")]
GATHER_ROWS = [row for row in ROWS if row.name.startswith("gather_")]


def _indptr(lengths: list[int], device: str) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.tensor(lengths).cumsum(0)]).to(device)


@pytest.mark.parametrize("reduce", list(SEGMENT_REDUCE))
def test_matches_torch_segment_reduce(reduce: str, device: str) -> None:
    """Non-empty segments (where torch.segment_reduce agrees with
    torch_scatter), csr and coo alike."""
    torch.manual_seed(0)
    lengths = torch.randint(1, 40, (300,))
    src = torch.randn(int(lengths.sum()), 16, dtype=torch.float64, device=device)
    indptr = _indptr(lengths.tolist(), device)
    index = torch.repeat_interleave(torch.arange(300, device=device), lengths.to(device))
    want = torch.segment_reduce(src, SEGMENT_REDUCE[reduce], lengths=lengths.to(device), axis=0)
    torch.testing.assert_close(torchplug.segment_csr(src, indptr, reduce=reduce), want)
    torch.testing.assert_close(torchplug.segment_coo(src, index, reduce=reduce), want)


@pytest.mark.parametrize("bad, message", [
    ([1, 3, 5], "must start at 0"),
    ([0, 4, 2, 6], "must not decrease"),
    ([0, 3, 11], "ends at 11, past the 10 positions"),
])
def test_malformed_indptr_raises_on_cpu(bad: list[int], message: str) -> None:
    src = torch.randn(10, 2)
    indptr = torch.tensor(bad)
    for op in (torchplug.segment_sum_csr, lambda s, i: torchplug.segment_max_csr(s, i)[0]):
        with pytest.raises(IndexError, match=f"torchplug::segment_.*_csr: argument 'indptr' {message}"):
            op(src, indptr)
    if "past" not in message:
        with pytest.raises(IndexError, match=f"torchplug::gather_csr: argument 'indptr' {message}"):
            torchplug.gather_csr(torch.randn(len(bad) - 1, 2), indptr)


def test_unsorted_coo_index_raises_on_cpu() -> None:
    with pytest.raises(IndexError, match="torchplug::segment_sum_coo: argument 'index' must be sorted"):
        torchplug.segment_sum_coo(torch.randn(4, 2), torch.tensor([0, 2, 1, 3]))
    with pytest.raises(IndexError, match="torchplug::segment_max_coo: argument 'index' must be sorted"):
        torchplug.segment_max_coo(torch.randn(2, 4), torch.tensor([[0, 1, 1, 2], [0, 2, 1, 3]]))


@cuda
def test_cuda_checked_mode_raises_and_unchecked_stays_in_bounds() -> None:
    """Checked mode raises as the CPU does; outside it a malformed indptr or an
    unsorted index reads nothing out of bounds (compute-sanitizer runs the
    same calls) and an unsorted coo index still reduces like scatter."""
    src = torch.randn(10, 4, device="cuda")
    indptr = torch.tensor([0, 7, 3, 40], device="cuda")
    index = torch.tensor([0, 2, 1, 3, 3, 0, 1, 1, 2, 0], device="cuda")
    with torchplug.checked():
        with pytest.raises(IndexError, match="'indptr' must not decrease"):
            torchplug.segment_sum_csr(src, indptr)
        with pytest.raises(IndexError, match="'index' must be sorted"):
            torchplug.segment_sum_coo(src, index)
    torchplug.segment_max_csr(src, indptr)
    torchplug.gather_csr(src[:3], indptr)
    torch.testing.assert_close(torchplug.segment_sum_coo(src, index), torchplug.scatter_sum(src, index, 0))
    torch.cuda.synchronize()


@cuda
def test_cuda_overlapping_hubs_past_the_hub_list() -> None:
    """An indptr that goes back to 0 makes 200 rows of all 6,000 positions:
    more hubs than a valid CSR of 6,000 positions can hold (182 with a limit
    of 32), so more than the hub list takes. Outside checked mode every one
    of them is still reduced (they share their blocks' partials), and the
    empty rows between them give 0."""
    src = torch.randn(6000, 4, device="cuda", dtype=torch.float64)
    indptr = torch.tensor([0, 6000] * 200, device="cuda")
    got = torchplug.segment_sum_csr(src, indptr)
    want = torch.zeros(399, 4, device="cuda", dtype=torch.float64)
    want[0::2] = src.sum(0)
    torch.testing.assert_close(got, want)


@cuda
@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
@pytest.mark.parametrize("segments", [10_000, 40, 3])
def test_cuda_long_segments_in_order(reduce: str, segments: int) -> None:
    """Few segments over many rows are hubs (the hub block shrinks with the
    work): right against torch.segment_reduce in float64,
    bitwise the same on every run, and the arg of min and max exact."""
    torch.manual_seed(1)
    E = 400_000
    cuts = torch.randint(1, E, (segments - 1,)).sort().values
    indptr = torch.cat([torch.tensor([0]), cuts, torch.tensor([E])]).cuda()
    src = torch.randn(E, 8, dtype=torch.float64, device="cuda")
    lengths = indptr.diff()
    runs = [torchplug.segment_csr(src.float(), indptr, reduce=reduce) for _ in range(3)]
    for run in runs[1:]:
        assert torch.equal(run, runs[0])
    want = torch.segment_reduce(src, SEGMENT_REDUCE[reduce], lengths=lengths, axis=0)
    want = torch.where(lengths.view(-1, 1) > 0, want, 0)
    got = torchplug.segment_csr(src, indptr, reduce=reduce)
    torch.testing.assert_close(got, want)
    if reduce in ("min", "max"):  # the arg: a source in the segment holding the value, E if empty
        values, arg = getattr(torchplug, f"segment_{reduce}_csr")(src, indptr)
        full = lengths.view(-1, 1).expand(-1, 8) > 0
        assert torch.equal(arg[~full], torch.full_like(arg[~full], E))
        assert torch.equal(src.gather(0, arg.clamp(max=E - 1))[full], values[full])
        row = torch.repeat_interleave(torch.arange(segments, device="cuda"), lengths)
        segment = torch.arange(segments, device="cuda").view(-1, 1).expand(-1, 8)
        assert torch.equal(row[arg.clamp(max=E - 1)][full], segment[full])


def test_gather_inverts_segment_sum(device: str) -> None:
    """gather_csr spreads each segment's value over its positions, so
    segment_sum_csr of it is the value times the length; gather_coo with the
    expanded index gives the same as gather_csr."""
    torch.manual_seed(2)
    lengths = [3, 0, 5, 1, 0, 7]
    indptr = _indptr(lengths, device)
    index = torch.repeat_interleave(torch.arange(6, device=device), torch.tensor(lengths, device=device))
    values = torch.randn(6, 3, dtype=torch.float64, device=device)
    spread = torchplug.gather_csr(values, indptr)
    assert torch.equal(spread, torchplug.gather_coo(values, index))
    counts = torch.tensor(lengths, dtype=torch.float64, device=device).view(-1, 1)
    torch.testing.assert_close(torchplug.segment_sum_csr(spread, indptr), values * counts)


@pytest.mark.parametrize("columns", [1, 3, 8, 132])
def test_gather_csr_over_many_tiles(columns: int, device: str) -> None:
    """Sized for the CUDA gather_csr kernel, whose warps each take a run of
    tiles of 32 to 256 positions, most runs starting inside a slice (a search
    of indptr), and carry a row from tile to tile: runs of more than 32 empty
    segments (at the start too), hub segments, two slices sharing one indptr
    and positions past the last segment (zeros); from one value a position to
    more vectors than a warp has lanes."""
    torch.manual_seed(5)
    segments = 20_000 if columns < 100 else 4_000
    lengths = torch.randint(0, 200, (segments,)) * (torch.rand(segments) < 0.4)
    lengths[torch.randint(0, segments, (3,))] = 50_000 if columns < 100 else 10_000
    lengths[:40] = 0
    lengths[1_000:1_100] = 0
    indptr = _indptr(lengths.tolist(), device).view(1, -1)
    src = torch.randn(2, segments, columns, device=device)
    positions = int(lengths.sum()) + 777
    out = torch.full((2, positions, columns), float("nan"), device=device)
    torchplug.gather_csr(src, indptr, out=out)
    rows = torch.repeat_interleave(torch.arange(segments), lengths).to(device)
    want = torch.cat([src.index_select(1, rows), src.new_zeros(2, 777, columns)], dim=1)
    assert torch.equal(out, want)


def test_out_forms_overwrite_and_refuse_grad(device: str) -> None:
    """segment_csr's and the gathers' out= forms overwrite out (segment_coo's
    reduces into it, as scatter does) and are not differentiable."""
    src = torch.randn(6, 2, device=device)
    indptr = torch.tensor([0, 2, 6], device=device)
    out = torch.full((2, 2), 100.0, device=device)
    assert torchplug.segment_sum_csr(src, indptr, out=out) is out
    torch.testing.assert_close(out, torchplug.segment_sum_csr(src, indptr))
    coo = torch.full((2, 2), 100.0, device=device)
    torchplug.segment_sum_coo(src, torch.tensor([0, 0, 1, 1, 1, 1], device=device), out=coo)
    torch.testing.assert_close(coo, out + 100)
    leaf = src.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="torchplug::segment_sum_csr_: the out= form does not support"):
        torchplug.segment_sum_csr(leaf, indptr, out=torch.empty(2, 2, device=device))
    with pytest.raises(RuntimeError, match="torchplug::gather_coo_: the out= form does not support"):
        torchplug.gather_coo(leaf, torch.tensor([1, 0], device=device), out=torch.empty(2, 2, device=device))


def test_errors_name_op_and_argument() -> None:
    src = torch.randn(6, 2)
    with pytest.raises(RuntimeError, match="torchplug::segment_sum_csr: argument 'indptr' of shape"):
        torchplug.segment_sum_csr(src, torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(RuntimeError, match="torchplug::segment_mean_csr: argument 'indptr' must be an int64 tensor"):
        torchplug.segment_mean_csr(src, torch.tensor([0, 6], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="torchplug::gather_csr: src has 6 slices along dim 0 but indptr 1"):
        torchplug.gather_csr(src, torch.tensor([0, 6]))
    with pytest.raises(IndexError, match="torchplug::gather_coo: argument 'index' holds the value 6"):
        torchplug.gather_coo(src, torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="torchplug.segment_csr: argument 'reduce' must be one of"):
        torchplug.segment_csr(src, torch.tensor([0, 6]), reduce="std")


# --------------------------------------------------------------------------- deterministic mode


@pytest.mark.parametrize("kind", ["random", "power-law"])
@pytest.mark.parametrize("F", [1, 16, 64])
@pytest.mark.parametrize("row", rows_param(SEGMENT_ROWS))
def test_deterministic_mode_repeats_bitwise(row: OpRow, F: int, kind: str, device: str) -> None:
    """Under torch.use_deterministic_algorithms(True) two calls on the same
    float32 inputs give the same bits (values, the arg of min and max, src's
    gradient) for every segment reduction, csr and coo, at F = 1, 16 and 64:
    segments of a sorted random index, and of a sorted power-law one whose
    largest segment holds thousands of sources. The first run also against
    the float64 reference (scatter_reference) within the reduction's bound."""
    g = torch.Generator().manual_seed(100 + F)
    src = values((DET_E, F), torch.float32, row.reduce, g, zeros=False).to(device)
    index = det_index(kind, DET_E, DET_N, g).sort().values
    grad = torch.randn(DET_N, F, generator=g).to(device)
    sample = Sample((src, row.positions(index, DET_N).to(device)), dim_size=DET_N, desc=kind)
    assert_deterministic_runs(row, sample, grad, index, f"{row.name} {kind} F={F}")


@pytest.mark.parametrize("kind", ["random", "power-law"])
@pytest.mark.parametrize("F", [1, 16, 64])
@pytest.mark.parametrize("row", rows_param(GATHER_ROWS))
def test_deterministic_mode_gather_backward_repeats_bitwise(row: OpRow, F: int, kind: str, device: str) -> None:
    """The gathers copy; their src gradient sums the gradient of each
    slice's positions (gather_coo's over an unsorted index, gather_csr's over
    the segments of a sorted one, a hub of thousands in the power law): the
    same bits on two calls under torch.use_deterministic_algorithms(True),
    and the scatter-sum of the gradient in float64 within its error bound."""
    g = torch.Generator().manual_seed(200 + F)
    src = torch.randn(DET_N, F, generator=g).to(device)
    index = det_index(kind, DET_E, DET_N, g)
    if row.name == "gather_csr":
        index = index.sort().values
        positions = _indptr(torch.bincount(index, minlength=DET_N).tolist(), device)
    else:
        positions = index.to(device)
    grad = torch.randn(DET_E, F, generator=g).to(device)
    sample = Sample((src, positions), desc=kind)
    with deterministic_algorithms():
        runs = [forward_backward(row, sample, grad) for _ in range(2)]
    context = f"{row.name} {kind} F={F}"
    for first, second in zip(*runs):
        assert_bitwise(second, first, f"{context}: runs differ")
    row.check(runs[0][:1], sample, "deterministic mode")
    assert_reduced_close(runs[0][1].cpu(), reduce_reference(grad.cpu(), index, 0, "sum", DET_N), "sum",
                         torch.float32, f"{context}: src gradient")


# --------------------------------------------------------------------------- zero segments, zero sizes


def _slices(src: torch.Tensor, positions: torch.Tensor) -> int:
    """The number of slices of src before the reduced dim (none: the
    references' csr_rows, which stacks one row of segments per slice, has
    nothing to stack, and neither outputs nor gradients have elements)."""
    return math.prod(src.shape[:positions.dim() - 1])


def _zero_size_grad(row: OpRow, sample: Sample, reference: Sample, context: str) -> None:
    """src's gradient through the friendly function on `sample` against the
    closed form on `reference` (the same inputs, with the output size the
    docs give): src's shape and dtype, and the values, exactly."""
    leaf = sample.inputs[0].detach().clone().requires_grad_()
    result = row.call_with((leaf,), sample)[0]
    grad = torch.randn(result.shape, dtype=torch.float64).to(result.device)
    (got,) = torch.autograd.grad(result, (leaf,), grad, allow_unused=True)
    assert got is not None and got.shape == leaf.shape and got.dtype == leaf.dtype, context
    if _slices(*sample.inputs):
        torch.testing.assert_close(got, row.grad_reference(reference, grad)[0].to(got.device), rtol=0, atol=0,
                                   msg=lambda m: f"{context}: src gradient\n{m}")


#: (src shape, indptr): zero segments (an indptr of one entry), zero rows,
#: zero features, zero slices, per slice and shared by the slices.
CSR_ZERO_CASES = [
    pytest.param((0, 3), [0], id="no segments, no rows"),
    pytest.param((0,), [0], id="no segments, 1-D"),
    pytest.param((5, 0), [0], id="no segments, no features"),
    pytest.param((0, 0), [0], id="no segments, nothing"),
    pytest.param((5, 0), [0, 2, 2, 5], id="no features"),
    pytest.param((2, 0, 3), [[0]], id="no segments, indptr [1, 1]"),
    pytest.param((2, 4, 3), [[0], [0]], id="no segments per slice"),
    pytest.param((0, 4, 3), [[0, 1, 4]], id="no slices"),
    pytest.param((2, 4, 0), [[0, 1, 4], [0, 3, 3]], id="no features per slice"),
]


@pytest.mark.parametrize("src_shape, indptr", CSR_ZERO_CASES)
@pytest.mark.parametrize("row", rows_param(CSR_ROWS))
def test_segment_csr_zero_segments_and_zero_sizes(row: OpRow, src_shape: tuple, indptr: list,
                                                  device: str) -> None:
    """As torch_scatter: the output is src's shape with N = indptr.size(-1) - 1
    slots along dim = indptr.dim() - 1 (0 for an indptr of one entry),
    empty slots hold 0 (mul: 1) with arg src.size(dim), and src's gradient
    has src's shape, 0 at positions in no segment; out= of that shape is
    written and returned."""
    src = torch.randn(src_shape, dtype=torch.float64).to(device)
    positions = torch.tensor(indptr, dtype=torch.long).to(device)
    dim = positions.dim() - 1
    want_shape = list(src_shape)
    want_shape[dim] = positions.size(-1) - 1
    sample = Sample((src, positions), desc=f"src {list(src_shape)}, indptr {indptr}")
    outputs = row.call(sample)
    for output in outputs:
        assert list(output.shape) == want_shape and output.device == src.device, sample
    if _slices(src, positions):
        row.check(outputs, sample)
    out = torch.full(want_shape, 7.0, dtype=torch.float64).to(device)
    results = row.call(Sample((src, positions), out=out), out=out)
    assert results[0] is out and len(results) == len(outputs), sample
    if _slices(src, positions):
        row.check(results, sample, "out=")
    _zero_size_grad(row, sample, sample, f"{row.name} {sample!r}")


def _coo_size(src: torch.Tensor, index: torch.Tensor) -> int:
    """torch_scatter's segment_coo output size without dim_size: max + 1 over
    the index expanded to src's leading sizes (not over src's trailing,
    feature dimensions), 0 when that is empty."""
    expanded = index.expand(list(src.shape[:index.dim() - 1]) + [index.size(-1)])
    return int(expanded.max()) + 1 if expanded.numel() else 0


#: (src shape, sorted index, dim_size): empty index, zero rows, zero
#: features, zero slices.
COO_ZERO_CASES = [
    pytest.param((0, 3), [], None, id="empty index, default size"),
    pytest.param((0,), [], None, id="empty index, 1-D"),
    pytest.param((0, 3), [], 0, id="empty index, dim_size 0"),
    pytest.param((0, 0), [], 2, id="nothing, dim_size"),
    pytest.param((5, 0), [0, 0, 1, 2, 2], None, id="no features, default size"),
    pytest.param((5, 0), [0, 0, 1, 2, 2], 4, id="no features, dim_size"),
    pytest.param((2, 4, 0), [[0, 0, 1, 1], [0, 2, 2, 2]], None, id="no features per slice, default size"),
    pytest.param((0, 5, 3), [[0, 0, 1, 3, 3]], None, id="no slices, default size"),
    pytest.param((2, 0, 3), [[]], 3, id="empty index [1, 0], dim_size"),
]


@pytest.mark.parametrize("src_shape, index, dim_size", COO_ZERO_CASES)
@pytest.mark.parametrize("row", rows_param(COO_ROWS))
def test_segment_coo_zero_sizes(row: OpRow, src_shape: tuple, index: list, dim_size: Optional[int],
                                device: str) -> None:
    """As torch_scatter: the output is src's shape with N = dim_size, or max
    + 1 over the index (expanded to src's leading sizes: 0 when that is
    empty), along dim = index.dim() - 1; empty slots hold 0 (mul: 1) with arg
    src.size(dim); src's gradient has src's shape; an out= of 7s with
    nothing to reduce comes back unchanged."""
    src = torch.randn(src_shape, dtype=torch.float64).to(device)
    positions = torch.tensor(index, dtype=torch.long).to(device)
    dim = positions.dim() - 1
    n = dim_size if dim_size is not None else _coo_size(src, positions)
    want_shape = list(src_shape)
    want_shape[dim] = n
    sample = Sample((src, positions), dim_size=dim_size, desc=f"src {list(src_shape)}, index {index}")
    sized = Sample((src, positions), dim_size=n, desc=sample.desc)
    outputs = row.call(sample)
    for output in outputs:
        assert list(output.shape) == want_shape and output.device == src.device, (
            f"{row.name} {sample!r}: output of shape {list(output.shape)}, torch_scatter's is {want_shape}")
    row.check(outputs, sized)
    if src.numel() == 0:
        out = torch.full(want_shape, 7.0, dtype=torch.float64).to(device)
        with_out = Sample((src, positions), out=out, desc=sample.desc)
        results = row.call(with_out, out=out)
        assert results[0] is out, sample
        assert bool((out == 7).all()), f"{row.name} {sample!r}: out= changed with nothing to reduce"
        for position in row.args:
            assert bool((results[position] == src.size(dim)).all()), sample
    _zero_size_grad(row, sample, sized, f"{row.name} {sample!r}")


#: (row name, src shape, positions): zero segments, zero rows, zero
#: features, zero slices, for gather_csr (an indptr; E its last value) and
#: gather_coo (an index; E its length).
GATHER_ZERO_CASES = [
    pytest.param("gather_csr", (0, 3), [0], id="csr no segments"),
    pytest.param("gather_csr", (0,), [0], id="csr no segments, 1-D"),
    pytest.param("gather_csr", (0, 0), [0], id="csr no segments, nothing"),
    pytest.param("gather_csr", (3, 0), [0, 1, 1, 4], id="csr no features"),
    pytest.param("gather_csr", (2, 0, 3), [[0]], id="csr no segments, indptr [1, 1]"),
    pytest.param("gather_csr", (2, 3, 0), [[0, 1, 1, 4], [0, 0, 2, 4]], id="csr no features per slice"),
    pytest.param("gather_csr", (0, 3, 2), [[0, 2, 2, 5]], id="csr no slices"),
    pytest.param("gather_csr", (2, 0), [0, 0, 0], id="csr empty segments"),
    pytest.param("gather_coo", (0, 3), [], id="coo no rows, empty index"),
    pytest.param("gather_coo", (0,), [], id="coo 1-D empty"),
    pytest.param("gather_coo", (4, 0), [0, 3, 3], id="coo no features"),
    pytest.param("gather_coo", (0, 0), [], id="coo nothing"),
    pytest.param("gather_coo", (2, 4, 0), [[0, 3, 1], [2, 2, 0]], id="coo no features per slice"),
    pytest.param("gather_coo", (0, 4, 2), [[0, 3, 1]], id="coo no slices"),
]


@pytest.mark.parametrize("name, src_shape, positions", GATHER_ZERO_CASES)
def test_gather_zero_segments_and_zero_sizes(name: str, src_shape: tuple, positions: list, device: str) -> None:
    """The output is src's shape with E positions along dim =
    positions.dim() - 1 (gather_csr: indptr's last value; gather_coo: the
    index's length), each holding its segment's or index value's slice, 0
    past the last segment; src's gradient has src's shape and sums each
    slice's positions."""
    row = next(r for r in GATHER_ROWS if r.name == name)
    src = torch.randn(src_shape, dtype=torch.float64).to(device)
    t = torch.tensor(positions, dtype=torch.long).to(device)
    dim = t.dim() - 1
    want_shape = list(src_shape)
    want_shape[dim] = (int(t.reshape(-1)[-1]) if t.numel() else 0) if name == "gather_csr" else t.size(-1)
    sample = Sample((src, t), desc=f"src {list(src_shape)}, positions {positions}")
    outputs = row.call(sample)
    assert list(outputs[0].shape) == want_shape and outputs[0].device == src.device, sample
    if _slices(src, t):
        row.check(outputs, sample)
    _zero_size_grad(row, sample, sample, f"{name} {sample!r}")


@pytest.mark.parametrize("entries", [1, 0], ids=["indptr [0]", "indptr []"])
def test_gather_csr_zero_segments_into_positions(entries: int, device: str) -> None:
    """No segments but E positions (out= of E rows, or the schema's
    dim_size): every position is past the last segment and holds 0, as
    torch_scatter's gather_csr leaves them to segment_csr's backward; the
    functional form's src gradient is empty. An indptr of no entries too,
    which has no start to read."""
    src = torch.randn(0, 3, dtype=torch.float64, device=device)
    indptr = torch.zeros(entries, dtype=torch.long, device=device)
    out = torch.full((4, 3), float("nan"), dtype=torch.float64, device=device)
    assert torchplug.gather_csr(src, indptr, out=out) is out
    assert_bitwise(out, torch.zeros(4, 3, dtype=torch.float64, device=device), "out=")
    leaf = src.clone().requires_grad_()
    result = torch.ops.torchplug.gather_csr(leaf, indptr, 4)
    assert_bitwise(result.detach(), torch.zeros(4, 3, dtype=torch.float64, device=device), "dim_size=4")
    (grad,) = torch.autograd.grad(result, (leaf,), torch.randn(4, 3, dtype=torch.float64, device=device))
    assert grad.shape == (0, 3) and grad.dtype == torch.float64

