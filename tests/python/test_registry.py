"""torchplug.registry(): the C++ registry as Python sees it, checked against the
dispatcher (schemas, kernels) and against what the ops actually accept."""

from __future__ import annotations

import re

import pytest
import torch

import torchplug
from torchplug import OpInfo

ALL_DTYPES = ("Half", "BFloat16", "Float", "Double", "Byte", "Char", "Short", "Int", "Long")
SCATTER_DTYPES = ("Half", "BFloat16", "Float", "Double", "Int", "Long")

EXPECTED = {
    # name: (plugin, dtypes)
    "add": ("add", ALL_DTYPES),
    "scatter_sum": ("scatter", SCATTER_DTYPES),
    "scatter_sum_": ("scatter", SCATTER_DTYPES),
}

# The registry's dtype names -> torch dtypes (c10::toString spelling).
DTYPE_BY_NAME = {
    "Half": torch.float16,
    "BFloat16": torch.bfloat16,
    "Float": torch.float32,
    "Double": torch.float64,
    "Byte": torch.uint8,
    "Char": torch.int8,
    "Short": torch.int16,
    "Int": torch.int32,
    "Long": torch.int64,
}


def by_name() -> dict[str, OpInfo]:
    """The built-in ops (namespace torchplug) by name."""
    return {info.name: info for info in torchplug.registry() if info.namespace == "torchplug"}


def test_registry_entries_are_opinfos() -> None:
    ops = torchplug.registry()
    assert ops, "the registry is empty"
    for info in ops:
        assert isinstance(info, OpInfo)
        assert isinstance(info.backends, tuple) and isinstance(info.dtypes, tuple)
        assert info.doc and "\n" not in info.doc
    names = [info.qualified_name for info in ops]
    assert len(names) == len(set(names)), f"duplicate names in {names}"
    assert all(info.op is getattr(getattr(torch.ops, info.namespace), info.name) for info in ops)


def test_registry_lists_builtin_ops() -> None:
    ops = by_name()
    for name in EXPECTED:
        assert name in ops, f"{name} missing from {sorted(ops)}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_plugin_and_dtypes(name: str) -> None:
    info = by_name()[name]
    plugin, dtypes = EXPECTED[name]
    assert info.plugin == plugin
    assert set(info.dtypes) == set(dtypes)
    assert len(info.dtypes) == len(dtypes)


def _strip_namespace(schema: str) -> str:
    return re.sub(r"^torchplug::", "", schema)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_schema_matches_dispatcher(name: str) -> None:
    info = by_name()[name]
    dispatcher = str(getattr(torch.ops.torchplug, name).default._schema)
    assert _strip_namespace(dispatcher) == info.schema
    assert info.schema.startswith(name + "(")


def test_every_registry_op_matches_dispatcher() -> None:
    """Also ops that a run-time plugin may have added, in its own namespace."""
    for info in torchplug.registry():
        schema = str(info.op.default._schema)
        assert schema == f"{info.namespace}::{info.schema}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_backends(name: str) -> None:
    info = by_name()[name]
    assert "CPU" in info.backends
    assert "Meta" in info.backends
    assert ("CUDA" in info.backends) == bool(torchplug.with_cuda)
    assert set(info.backends) <= {"CPU", "CUDA", "Meta"}
    # Each listed backend really has a kernel in the dispatcher.
    for key in info.backends:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"torchplug::{name}", key)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_differentiable(name: str) -> None:
    info = by_name()[name]
    assert info.differentiable is True
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"torchplug::{name}", "Autograd")


def test_every_op_reachable() -> None:
    for info in torchplug.registry():
        assert callable(info.op)
        if info.namespace == "torchplug":
            assert callable(getattr(torchplug, info.name))


def test_unknown_name_is_attribute_error() -> None:
    with pytest.raises(AttributeError):
        torchplug.no_such_op_here  # noqa: B018


def _example_call(name: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Calls registry op `name` through torchplug.<name> and through plain PyTorch."""
    torch.manual_seed(0)
    # Small nonzero integers: every sum is exact in every listed dtype.
    x = torch.randint(1, 20, (6, 3)).to(dtype)
    y = torch.randint(1, 20, (6, 3)).to(dtype)
    index = torch.tensor([0, 2, 1, 0, 2, 3])
    fn = getattr(torchplug, name)
    if name == "add":
        return fn(x, y), x + y
    if name == "scatter_sum":
        return fn(x, index, 0, dim_size=4), torch.zeros(4, 3, dtype=dtype).index_add_(0, index, x)
    if name == "scatter_sum_":
        out = y[:4].clone()
        fn(out, x, index, 0)  # the schema-level in-place op returns nothing
        return out, y[:4].clone().index_add_(0, index, x)
    raise AssertionError(name)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_listed_dtypes_work_via_torchplug_name(name: str) -> None:
    """torchplug.<name> accepts every dtype the registry lists, with correct results
    (small integers and exactly representable sums: exact for every dtype)."""
    for dtype_name in by_name()[name].dtypes:
        dtype = DTYPE_BY_NAME[dtype_name]
        got, want = _example_call(name, dtype)
        assert got.dtype == dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["scatter_sum", "scatter_sum_"])
def test_unlisted_dtype_rejected(name: str) -> None:
    """A dtype outside the registry's list is refused, with the op's name."""
    assert "Char" not in by_name()[name].dtypes
    with pytest.raises(RuntimeError, match="torchplug::scatter_sum"):
        _example_call(name, torch.int8)
