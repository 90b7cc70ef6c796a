"""The ops under PyTorch's compiler stacks: TorchScript, torch.library.opcheck
(schema, autograd registration, fake tensors, AOT dispatch) and torch.compile.
Every result is compared with the same computation run eagerly."""

from __future__ import annotations

import io
import shutil
from typing import Callable, Optional

import pytest
import torch
from torch import Tensor
from torch.library import opcheck

import torchplug
from op_table import OpRow, Sample, rows_param

# --------------------------------------------------------------------------- TorchScript


@torch.jit.script
def scripted_add(a: Tensor, b: Tensor) -> Tensor:
    return torchplug.add(a, b)


@torch.jit.script
def scripted_scatter_sum(src: Tensor, index: Tensor, dim: int, dim_size: Optional[int]) -> Tensor:
    return torchplug.scatter_sum(src, index, dim, None, dim_size)


@torch.jit.script
def scripted_scatter_sum_out(src: Tensor, index: Tensor, dim: int, out: Tensor) -> Tensor:
    return torchplug.scatter_sum(src, index, dim, out=out)


@torch.jit.script
def scripted_scatter(
    src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int], reduce: str
) -> Tensor:
    return torchplug.scatter(src, index, dim, out, dim_size, reduce)


@torch.jit.script
def scripted_ops(src: Tensor, bias: Tensor, index: Tensor, n: int) -> Tensor:
    """The schema-level ops called directly."""
    return torch.ops.torchplug.scatter_sum(torch.ops.torchplug.add(src, bias), index, 0, n)


def _graph_inputs(device: str, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """x [N, F], bias [F], src_idx [E], dst_idx [E] for a small random graph."""
    N, E, F = 13, 57, 6
    x = torch.randn(N, F, dtype=dtype, device=device)
    bias = torch.randn(F, dtype=dtype, device=device)
    src_idx = torch.randint(0, N, (E,), device=device)
    dst_idx = torch.randint(0, N, (E,), device=device)
    return x, bias, src_idx, dst_idx


def test_script_add(device: str) -> None:
    torch.manual_seed(0)
    a = torch.randn(5, 1, 4, device=device)
    b = torch.randint(-9, 9, (3, 1), device=device, dtype=torch.int32)
    got = scripted_add(a, b)
    torch.testing.assert_close(got, torchplug.add(a, b), rtol=0, atol=0)
    torch.testing.assert_close(got, a + b, rtol=0, atol=0)


@pytest.mark.parametrize("dim_size", [None, 20])
def test_script_scatter_sum(dim_size: Optional[int], device: str, assert_same_result) -> None:
    torch.manual_seed(1)
    x, _, _, dst = _graph_inputs(device)
    src = x[torch.randint(0, x.size(0), (dst.numel(),), device=device)]
    got = scripted_scatter_sum(src, dst, 0, dim_size)
    want = torchplug.scatter_sum(src, dst, 0, dim_size=dim_size)
    assert_same_result(got, want)
    got = scripted_scatter(src, dst, -2, None, dim_size, "sum")
    assert_same_result(got, want)


def test_script_scatter_sum_out(device: str, assert_same_result) -> None:
    torch.manual_seed(2)
    x, _, _, dst = _graph_inputs(device)
    src = torch.randn(dst.numel(), x.size(1), device=device)
    base = torch.randn(x.size(0), x.size(1), device=device)

    out = base.clone()
    result = scripted_scatter_sum_out(src, dst, 0, out)
    assert result.data_ptr() == out.data_ptr()
    want = torchplug.scatter_sum(src, dst, 0, out=base.clone())
    assert_same_result(out, want)

    out = base.clone()
    result = scripted_scatter(src, dst, 0, out, None, "add")
    assert result.data_ptr() == out.data_ptr()
    assert_same_result(out, want)


@pytest.mark.parametrize("reduce", ["mean", "mul", "min", "max"])
def test_script_scatter_reductions(reduce: str, device: str, assert_same_result) -> None:
    torch.manual_seed(3)
    x, _, _, dst = _graph_inputs(device)
    src = torch.randn(dst.numel(), 2, device=device)
    got = scripted_scatter(src, dst, 0, None, None, reduce)
    assert_same_result(got, torchplug.scatter(src, dst, 0, reduce=reduce))


def test_script_scatter_unknown_reduce_raises(device: str) -> None:
    torch.manual_seed(3)
    x, _, _, dst = _graph_inputs(device)
    src = torch.randn(dst.numel(), 2, device=device)
    with pytest.raises(Exception, match="argument 'reduce' must be one of"):
        scripted_scatter(src, dst, 0, None, None, "median")


def test_script_schema_ops_and_grad(device: str, assert_same_result) -> None:
    torch.manual_seed(4)
    x, bias, _, dst = _graph_inputs(device, torch.float64)
    src = torch.randn(dst.numel(), x.size(1), dtype=torch.float64, device=device, requires_grad=True)
    bias.requires_grad_()
    got = scripted_ops(src, bias, dst, 15)
    want = torchplug.scatter_sum(torchplug.add(src, bias), dst, 0, dim_size=15)
    assert_same_result(got, want)
    g = torch.randn_like(got)
    torch.testing.assert_close(
        torch.autograd.grad(got, (src, bias), g), torch.autograd.grad(want, (src, bias), g)
    )


def test_script_save_load_roundtrip(device: str, assert_same_result) -> None:
    """A scripted module keeps calling the ops by name after serialisation."""

    class Layer(torch.nn.Module):
        def forward(self, x: Tensor, bias: Tensor, s: Tensor, d: Tensor) -> Tensor:
            return torchplug.scatter_sum(torchplug.add(x[s], bias), d, 0, None, x.size(0))

    torch.manual_seed(5)
    inputs = _graph_inputs(device)
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(Layer()), buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer, map_location=device)
    assert_same_result(loaded(*inputs), Layer()(*inputs))


# --------------------------------------------------------------------------- opcheck

# opcheck's default checks plus the static-shape AOT dispatch check, one at a
# time so a failure names the stack that broke.
TEST_UTILS = [
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_static",
    "test_aot_dispatch_dynamic",
]


def _add_samples(device: str) -> list[tuple]:
    torch.manual_seed(6)
    rg = dict(device=device, requires_grad=True)
    return [
        (torch.randn(3, 4, device=device), torch.randn(4, device=device)),
        (torch.randn(3, 4, **rg), torch.randn(2, 1, 4, **rg)),
        (torch.randn(5, **rg), torch.randn(5, device=device)),
        (torch.randint(-5, 5, (2, 3), device=device, dtype=torch.int32), torch.randn(3, device=device)),
        (torch.randn(4, 3, device=device).t(), torch.randn((), device=device, dtype=torch.float64)),
        (torch.randn(6, device=device, dtype=torch.float16), torch.randn(6, device=device)),
    ]


def _scatter_samples(device: str) -> list[tuple]:
    torch.manual_seed(7)
    idx = torch.tensor([0, 2, 1, 0, 2, 3], device=device)
    return [
        (torch.randn(6, 3, device=device), idx, 0, 4),
        (torch.randn(6, 3, device=device, requires_grad=True), idx, 0, 5),
        (torch.randn(2, 6, device=device, dtype=torch.float64, requires_grad=True), idx, -1, 4),
        (torch.randn(4, 6, 2, device=device), torch.randint(0, 3, (4, 6), device=device), 1, 3),
        (torch.randn(5, 4, device=device), torch.randint(0, 3, (5, 4), device=device), 0, 3),
    ]


def _scatter_inplace_samples(device: str) -> list[tuple]:
    torch.manual_seed(8)
    idx = torch.tensor([0, 2, 1, 0, 2, 3], device=device)
    return [
        (torch.randn(4, 3, device=device), torch.randn(6, 3, device=device), idx, 0),
        (torch.randn(4, 3, device=device), torch.randn(6, 3, device=device, requires_grad=True), idx, 0),
        (torch.randn(3, 4, device=device), torch.randn(3, 6, device=device), idx, 1),
        (
            torch.randn(4, 2, device=device, dtype=torch.float64),
            torch.randn(6, 2, device=device, dtype=torch.float64),
            torch.randint(0, 4, (6, 2), device=device),
            0,
        ),
    ]


# Hand-written samples of the ops that came first (gradients through the
# schema ops included); every row of the op table adds its own samples below.
SAMPLES: dict[str, Callable[[str], list[tuple]]] = {
    "add": _add_samples,
    "scatter_sum": _scatter_samples,
    "scatter_sum_": _scatter_inplace_samples,
}


#: The checks that run the op on fake tensors (OpRow.fake_tensors).
FAKE_TENSOR_UTILS = ("test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic")


def table_opcheck_calls(row: OpRow, device: str) -> list[tuple]:
    """(overload, args) for every sample of the row in float32, and float64
    samples with src (add: both operands) requiring grad."""
    calls = []
    for sample in row.samples(device, torch.float32, seed=12):
        calls.append(row.schema_args(sample))
    for sample in (row.grad_samples(device, seed=13) if row.differentiable else []):
        inputs = tuple(t.detach().clone().requires_grad_() if i < row.leaf_count else t
                       for i, t in enumerate(sample.inputs))
        calls.append(row.schema_args(Sample(inputs, sample.dim, sample.dim_size, sample.out, sample.desc)))
    return calls


@pytest.mark.parametrize("test_util", TEST_UTILS)
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_opcheck(name: str, test_util: str, device: str) -> None:
    op = getattr(torch.ops.torchplug, name).default
    for args in SAMPLES[name](device):
        result = opcheck(op, args, test_utils=test_util)
        assert result[test_util] == "SUCCESS", (args, result)


@pytest.mark.parametrize("test_util", TEST_UTILS)
@pytest.mark.parametrize("row", rows_param())
def test_opcheck_table(row: OpRow, test_util: str, device: str) -> None:
    """opcheck over the op table's samples: the functional schema, and the
    in-place schema for the samples with out=."""
    if not row.fake_tensors and test_util in FAKE_TENSOR_UTILS:
        pytest.skip(f"{row.name} has no Meta kernel (its output sizes depend on the values it computes)")
    for op, args in table_opcheck_calls(row, device):
        if test_util == "test_aot_dispatch_static" and row.sizes_from_data(op, args):
            continue  # a static graph cannot hold a size read off the index (the dynamic one does)
        result = opcheck(op, args, test_utils=test_util)
        assert result[test_util] == "SUCCESS", (op, args, result)


@pytest.mark.parametrize("row", rows_param())
def test_script_table(row: OpRow, device: str, assert_same_result) -> None:
    """The friendly function scripted (and torchplug.scatter(reduce=) for the
    scatter rows) gives the eager results on every sample of the row."""
    scripted = torch.jit.script(row.fn())
    generic = torch.jit.script(row.generic_fn()) if row.generic_fn() else None
    for sample in row.samples(device, torch.float32, seed=14):
        want = row.call(sample)
        got = row.call_with(sample.inputs[:row.leaf_count], sample, sample.fresh_out(), fn=scripted)
        assert len(got) == len(want), sample
        for g, w in zip(got, want):
            assert_same_result(g, w)
        if generic is not None:
            assert_same_result(row.call_generic(sample, fn=generic)[0], want[0])


# --------------------------------------------------------------------------- torch.compile


@pytest.fixture(autouse=True)
def _reset_dynamo():
    """Each test compiles from a clean slate (no cached graphs or guards)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def message_passing(x: Tensor, bias: Tensor, src_idx: Tensor, dst_idx: Tensor) -> Tensor:
    """One message-passing step: gather, shift by a bias, sum into the destinations."""
    messages = torchplug.add(x[src_idx], bias)
    summed = torchplug.scatter_sum(messages, dst_idx, 0, dim_size=x.size(0))
    return torchplug.scatter(summed, dst_idx[: summed.size(0)] % 3, 0, dim_size=3, reduce="sum")


def message_passing_out(x: Tensor, bias: Tensor, src_idx: Tensor, dst_idx: Tensor) -> Tensor:
    """The same step accumulating into a residual with out=."""
    out = x * 2
    torchplug.scatter_sum(torchplug.add(x[src_idx], bias), dst_idx, 0, out=out)
    return out


def _run(fn: Callable, inputs: tuple[Tensor, ...], weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Forward value and the gradients of (fn(...) * weights).sum() w.r.t. x and bias."""
    x, bias, s, d = (t.detach().clone() for t in inputs)
    x.requires_grad_()
    bias.requires_grad_()
    y = fn(x, bias, s, d)
    gx, gb = torch.autograd.grad((y * weights).sum(), (x, bias))
    return y.detach(), gx, gb


def _inductor_unavailable(device: str) -> Optional[str]:
    if device == "cpu" and shutil.which("c++") is None and shutil.which("g++") is None:
        return "inductor's CPU backend needs a C++ compiler"
    return None


BACKENDS = ["aot_eager", "inductor"]


def _compile(fn: Callable, backend: str, device: str, **kwargs) -> Callable:
    reason = _inductor_unavailable(device) if backend == "inductor" else None
    if reason:
        pytest.skip(reason)
    return torch.compile(fn, backend=backend, fullgraph=True, **kwargs)


def _assert_matches(got: tuple[Tensor, ...], want: tuple[Tensor, ...], backend: str) -> None:
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if backend == "aot_eager" and g.device.type == "cpu":
            # aot_eager runs the traced ATen/torchplug ops one by one: same math.
            # (On CUDA, atomics make float sums vary run to run: default tolerances.)
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        else:
            # Inductor may fuse and reorder the reductions in the backward.
            torch.testing.assert_close(g, w)


def _inductor_config(backend: str, device: str):
    """On CPU, skip Inductor's probing of SIMD instruction sets: it builds and
    loads a test library in a fresh Python process per ISA, ~13 s on this
    2-core machine. The kernels are still generated and compiled as C++, scalar."""
    if backend == "inductor" and device == "cpu":
        return torch._inductor.config.patch({"cpp.vec_isa_ok": False})
    return torch._inductor.config.patch({})


@pytest.mark.parametrize("backend", BACKENDS)
def test_compile_message_passing(backend: str, device: str) -> None:
    torch.manual_seed(9)
    inputs = _graph_inputs(device)
    weights = torch.randn(3, inputs[0].size(1), device=device)
    want = _run(message_passing, inputs, weights)
    with _inductor_config(backend, device):
        compiled = _compile(message_passing, backend, device)
        got = _run(compiled, inputs, weights)
    _assert_matches(got, want, backend)


def test_compile_dynamic_shapes(device: str) -> None:
    """dynamic=True: one graph for several graph sizes (symbolic shapes)."""
    torch.manual_seed(10)
    compiled = _compile(message_passing, "aot_eager", device, dynamic=True)
    for n_nodes, n_edges in ((13, 57), (21, 90), (8, 30)):
        x = torch.randn(n_nodes, 5, device=device)
        bias = torch.randn(5, device=device)
        s = torch.randint(0, n_nodes, (n_edges,), device=device)
        d = torch.randint(0, n_nodes, (n_edges,), device=device)
        weights = torch.randn(3, 5, device=device)
        _assert_matches(
            _run(compiled, (x, bias, s, d), weights),
            _run(message_passing, (x, bias, s, d), weights),
            "aot_eager",
        )


def test_compile_with_out(device: str) -> None:
    """scatter_sum(..., out=) inside a compiled function (the in-place op)."""
    torch.manual_seed(11)
    inputs = _graph_inputs(device)
    weights = torch.randn(inputs[0].shape, device=device)
    want = _run(message_passing_out, inputs, weights)
    compiled = _compile(message_passing_out, "aot_eager", device)
    _assert_matches(_run(compiled, inputs, weights), want, "aot_eager")


def _table_loss(row: OpRow, sample: Sample, weights: Tensor):
    """fn(src or (a, b), extra) -> (outputs..., loss) over the row's
    differentiable output 0, for compiling."""

    def fn(*tensors: Tensor):
        outputs = row.call_with(tensors, sample)
        return outputs + ((outputs[0] * weights).sum(),)

    return fn


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", rows_param())
def test_compile_table(row: OpRow, backend: str, device: str) -> None:
    """torch.compile(fullgraph=True) of each row's op, with and without
    dim_size (an output size read off the index values is an unbacked symbol):
    forward outputs (args included) and the gradients match eager."""
    if not row.differentiable:
        pytest.skip(f"{row.name} has no gradients")
    for sample in row.grad_samples(device, seed=15)[:3]:
        if sample.out is not None:
            continue
        leaves = sample.inputs[:row.leaf_count]
        want_out = row.call(sample)
        weights = torch.randn(want_out[0].shape, dtype=want_out[0].dtype, device=device)
        fn = _table_loss(row, sample, weights)

        def run(f):
            xs = [t.detach().clone().requires_grad_() for t in leaves]
            results = f(*xs)
            grads = torch.autograd.grad(results[-1], xs)
            return tuple(r.detach() for r in results[:-1]) + tuple(grads)

        want = run(fn)
        with _inductor_config(backend, device):
            got = run(_compile(fn, backend, device))
        torch._dynamo.reset()
        _assert_matches(got, want, backend)
