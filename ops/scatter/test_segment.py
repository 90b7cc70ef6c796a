"""segment_csr, segment_coo, gather_csr and gather_coo beyond the op table
(tests/python/op_table.py, which checks every shape class against plain
PyTorch): torch.segment_reduce as a second reference, malformed indptr and
unsorted index errors, the ordered long segments of the CUDA kernels, the
inverse relations of segments and gathers, and the out= forms."""

from __future__ import annotations

import pytest
import torch

import torchplug

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
SEGMENT_REDUCE = {"sum": "sum", "mean": "mean", "min": "min", "max": "max"}


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
@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
@pytest.mark.parametrize("segments", [10_000, 40, 3])
def test_cuda_long_segments_in_order(reduce: str, segments: int) -> None:
    """Few segments over many rows take the ordered long-row blocks (the block
    shrinks with the work): right against torch.segment_reduce in float64,
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


@pytest.mark.parametrize("columns", [1, 3, 8])
def test_gather_csr_over_many_chunks(columns: int, device: str) -> None:
    """Sized for the CUDA gather_csr kernel, which takes several chunks of
    positions per block and starts each from the row its predecessor ended
    on: empty segments (past its window of indptr), hub segments, two slices
    sharing one indptr (chunks that span them) and positions past the last
    segment (zeros)."""
    torch.manual_seed(5)
    segments = 20_000
    lengths = torch.randint(0, 200, (segments,)) * (torch.rand(segments) < 0.4)
    lengths[torch.randint(0, segments, (3,))] = 50_000
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
