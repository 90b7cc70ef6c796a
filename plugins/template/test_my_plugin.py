"""The template plugin, built against the installed torchplug and loaded from Python."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from torch.library import opcheck

import torchplug
import torchplug.jit


@pytest.fixture(scope="module")
def library() -> Path:
    return torchplug.jit.build_project(Path(__file__).parent) / "lib" / "libmy_plugin.so"


@pytest.fixture(scope="module")
def scale(library: Path):
    assert torchplug.load_plugin(library) == "my_plugin"
    return torch.ops.my_plugin.scale


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_needs_no_cuda_library(library: Path) -> None:
    """A plugin without CUDA sources loads where torch's CUDA libraries do not,
    whether or not the installed torchplug has CUDA kernels."""
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert any("libtorch_cpu.so" in line for line in needed), needed
    assert not any("cuda" in line for line in needed), needed


def test_registry(scale) -> None:
    (info,) = [op for op in torchplug.registry() if op.qualified_name == "my_plugin::scale"]
    assert info.namespace == "my_plugin" and info.plugin == "my_plugin"
    assert {"CPU", "Meta"} <= set(info.backends) and info.differentiable
    assert set(info.dtypes) == {"Float", "Double"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_forward(scale, dtype: torch.dtype) -> None:
    x = torch.randn(5, 7, dtype=dtype)
    torch.testing.assert_close(scale(x, 2.5), x * 2.5)
    torch.testing.assert_close(scale(x.t(), -1.0), -x.t())


def test_errors(scale) -> None:
    with pytest.raises(RuntimeError, match="my_plugin::scale: argument 'x' has unsupported dtype Int"):
        scale(torch.ones(3, dtype=torch.int32), 2.0)


def test_gradcheck(scale) -> None:
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: scale(t, 3.0), (x,))


def test_opcheck(scale) -> None:
    for x in [torch.randn(4, 3), torch.randn(4, 3, requires_grad=True)]:
        opcheck(scale.default, (x, 0.5))


def test_compile_fullgraph(scale) -> None:
    x = torch.randn(6, requires_grad=True)
    compiled = torch.compile(lambda t: scale(t, 2.0).sin(), fullgraph=True)
    out = compiled(x)
    torch.testing.assert_close(out, (x * 2.0).sin())
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, 2.0 * (x * 2.0).cos())
