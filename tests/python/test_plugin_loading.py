"""Loading plugins at run time: torchplug.load_plugin refuses what it cannot load
safely and leaves the process running; torchplug.load / load_inline build a
plugin against the installed SDK once and load it from the cache after."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchplug
from torchplug import PluginError

# Each test builds its own plugins (their op names are registered once per
# process), so the tests are independent under pytest-xdist.
HEADER = "#include <torchplug/core/library.h>\n#include <ATen/TensorOperators.h>\n#include <ATen/ops/empty_like.h>\n"


def one_op(ns: str, op: str = "twice", body: str = "return x * 2;") -> str:
    """A plugin of namespace `ns` with `op(Tensor x) -> Tensor` on the CPU."""
    return HEADER + f"""
namespace {{
const torchplug::core::OpDef kOp{{"{ns}::{op}(Tensor x) -> Tensor", {{at::kFloat}}, "for a test"}};
at::Tensor cpu(const at::Tensor& x) {{ kOp.check_dtypes({{TORCHPLUG_ARG(x)}}); {body} }}
}}
TORCHPLUG_LIBRARY({ns}, m) {{ m.define(kOp); }}
TORCHPLUG_LIBRARY_IMPL({ns}, CPU, m) {{ m.impl("{op}", &cpu); }}
"""


def test_a_plugin_in_its_own_namespace() -> None:
    assert torchplug.load_inline("loading_ns", one_op("loading_ns")) == "loading_ns"
    x = torch.arange(4.0)
    torch.testing.assert_close(torch.ops.loading_ns.twice(x), x * 2, rtol=0, atol=0)
    (info,) = [i for i in torchplug.registry() if i.namespace == "loading_ns"]
    assert (info.name, info.plugin, info.schema) == ("twice", "loading_ns", "twice(Tensor x) -> Tensor")
    assert info.backends == ("CPU",) and not info.differentiable and info.dtypes == ("Float",)
    # The dtype check reads the OpDef's list and names the op and the argument.
    with pytest.raises(RuntimeError, match=r"loading_ns::twice: argument 'x' has unsupported dtype Double"):
        torch.ops.loading_ns.twice(x.double())


def test_loading_again_is_a_no_op(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source = one_op("loading_again")
    torchplug.load_inline("loading_again", source)
    capfd.readouterr()
    assert torchplug.load_inline("loading_again", source) == "loading_again"
    assert "building" not in capfd.readouterr().err  # from the cache
    count = sum(i.namespace == "loading_again" for i in torchplug.registry())
    assert count == 1


def test_built_once_and_again_when_the_sources_change(tmp_path: Path) -> None:
    """Across processes, as a notebook restarted after an edit would see it."""
    script = tmp_path / "use.py"
    script.write_text(
        "import sys, torch, torchplug\n"
        "torchplug.load_inline('loading_changed', open(sys.argv[1]).read())\n"
        "print(torch.ops.loading_changed.twice(torch.ones(1)).item())\n"
    )
    env = {**os.environ, "TORCHPLUG_CACHE_DIR": str(tmp_path / "cache")}

    def run(body: str) -> tuple[str, bool]:
        source = tmp_path / "source.cpp"
        source.write_text(one_op("loading_changed", body=body))
        done = subprocess.run([sys.executable, str(script), str(source)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip(), "building plugin 'loading_changed'" in done.stderr

    assert run("return x * 2;") == ("2.0", True)
    assert run("return x * 2;") == ("2.0", False)  # from the cache
    assert run("return x * 5;") == ("5.0", True)  # edited: built anew


def assert_add_untouched() -> None:
    """torchplug's own add still runs its own kernel."""
    a, b = torch.ones(3), torch.arange(3.0)
    torch.testing.assert_close(torchplug.add(a, b), a + b, rtol=0, atol=0)


def test_a_clash_is_an_exception_and_registers_nothing() -> None:
    before = torchplug.registry()
    # The first op is new, the second is torchplug's own add; the CPU kernel
    # would replace add's if it were registered.
    source = HEADER + """
namespace {
const torchplug::core::OpDef kFresh{"torchplug::loading_fresh(Tensor x) -> Tensor", {at::kFloat}, "new"};
const torchplug::core::OpDef kAdd{"torchplug::add(Tensor a, Tensor b) -> Tensor", {at::kFloat}, "impostor"};
at::Tensor fresh(const at::Tensor& x) { return x; }
at::Tensor wrong_add(const at::Tensor& a, const at::Tensor&) { return at::empty_like(a).fill_(-1); }
}
TORCHPLUG_LIBRARY(torchplug, m) { m.define(kFresh).define(kAdd); }
TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) { m.impl("loading_fresh", &fresh); m.impl("add", &wrong_add); }
"""
    with pytest.raises(PluginError, match=r"'torchplug::add' \(plugin 'loading_clash'\) is already registered"):
        torchplug.load_inline("loading_clash", source)
    assert torchplug.registry() == before
    assert not hasattr(torch.ops.torchplug, "loading_fresh")  # undone, with its kernel
    assert_add_untouched()
    # The library stays mapped, its registrations gone: a second try is refused, not silently empty.
    with pytest.raises(PluginError, match="failed earlier in this process"):
        torchplug.load_inline("loading_clash", source)


def test_a_kernel_for_another_librarys_op_is_refused() -> None:
    source = HEADER + """
namespace { at::Tensor wrong_add(const at::Tensor& a, const at::Tensor&) { return at::empty_like(a).fill_(-1); } }
TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) { m.impl("add", &wrong_add); }
"""
    with pytest.raises(PluginError, match=r"the CPU kernel of 'torchplug::add' \(plugin 'loading_impl'\) would replace"):
        torchplug.load_inline("loading_impl", source)
    assert_add_untouched()


def test_a_malformed_schema_registers_nothing() -> None:
    before = torchplug.registry()
    source = HEADER + """
namespace {
const torchplug::core::OpDef kGood{"loading_schema::good(Tensor x) -> Tensor", {at::kFloat}, "fine"};
const torchplug::core::OpDef kBad{"loading_schema::bad(Tensor x -> Tensor", {at::kFloat}, "unbalanced"};
}
TORCHPLUG_LIBRARY(loading_schema, m) { m.define(kGood).define(kBad); }
"""
    with pytest.raises(PluginError, match="'.*libloading_schema.so' was not loaded"):
        torchplug.load_inline("loading_schema", source)
    assert torchplug.registry() == before
    assert not hasattr(torch.ops.loading_schema, "good")


def test_not_a_plugin(tmp_path: Path) -> None:
    library = Path(torch.__file__).parent / "lib" / "libc10.so"
    with pytest.raises(PluginError, match="is not a torchplug plugin"):
        torchplug.load_plugin(library)
    with pytest.raises(FileNotFoundError, match="no library at"):
        torchplug.load_plugin(tmp_path / "libmissing.so")


def test_built_for_another_torch(tmp_path: Path) -> None:
    torchplug.load_inline("loading_version", one_op("loading_version"))
    built = torchplug.loaded_plugins()["loading_version"]
    running = torch.__version__.split("+")[0]
    other = "9.99.9"[: len(running)].ljust(len(running), "9")
    copy = tmp_path / "libloading_version_old.so"
    copy.write_bytes(built.read_bytes().replace(f";torch={running};".encode(), f";torch={other};".encode()))
    with pytest.raises(PluginError, match=rf"built against torch {other}, but this process runs torch {running}"):
        torchplug.load_plugin(copy)
    # Built against another torchplug (the major and minor count: OpDef and the blocks are compiled in).
    ours = torchplug.__version__
    theirs = "9." + ours.split(".", 1)[1]
    copy.write_bytes(built.read_bytes().replace(f";torchplug={ours};".encode(), f";torchplug={theirs};".encode()))
    with pytest.raises(PluginError, match=rf"built against torchplug {theirs}, but this is torchplug {ours}"):
        torchplug.load_plugin(copy)


def test_found_by_name_on_the_plugin_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    torchplug.load_inline("loading_path", one_op("loading_path"))
    built = torchplug.loaded_plugins()["loading_path"]
    # An install prefix on the path: its lib/ is searched. Found, and loaded already.
    monkeypatch.setenv("TORCHPLUG_PLUGIN_PATH", f"{tmp_path}:{built.parent.parent}")
    assert torchplug.load_plugin("loading_path") == "loading_path"
    # The same plugin from another file is refused before it is loaded.
    shutil.copy(built, tmp_path / "libloading_path.so")
    with pytest.raises(PluginError, match=r"plugin 'loading_path' is already loaded, from '.*install/lib/libloading_path.so'"):
        torchplug.load_plugin("loading_path")
    monkeypatch.setenv("TORCHPLUG_PLUGIN_PATH", "")
    with pytest.raises(FileNotFoundError, match="no libloading_nowhere.so in TORCHPLUG_PLUGIN_PATH"):
        torchplug.load_plugin("loading_nowhere")


def test_a_build_error_is_reported() -> None:
    with pytest.raises(PluginError, match=r"building plugin 'loading_broken' failed(.|\n)*not_a_type"):
        torchplug.load_inline("loading_broken", HEADER + "not_a_type x;\n")


def test_torch_registration_macros_do_not_compile_in_a_plugin() -> None:
    """Torch's blocks register while their library is opened, where a clash
    (torchplug's own add, here) aborts the process: a plugin built by the SDK
    is refused at compile time, pointing at the guarded blocks."""
    source = HEADER + """
namespace { at::Tensor wrong_add(const at::Tensor& a, const at::Tensor&) { return at::empty_like(a).fill_(-1); } }
TORCH_LIBRARY(loading_torch_macros, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_FRAGMENT(torchplug, m) { m.def("add(Tensor a, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(torchplug, CPU, m) { m.impl("add", &wrong_add); }
"""
    with pytest.raises(PluginError, match="building plugin 'loading_torch_macros' failed") as error:
        torchplug.load_inline("loading_torch_macros", source)
    for macro, instead in [("TORCH_LIBRARY", "TORCHPLUG_LIBRARY(ns, m)"),
                           ("TORCH_LIBRARY_FRAGMENT", "TORCHPLUG_LIBRARY(ns, m)"),
                           ("TORCH_LIBRARY_IMPL", "TORCHPLUG_LIBRARY_IMPL(ns, key, m)")]:
        assert (f"{macro} registers outside torchplug.load_plugin's guard, where a clash aborts the process: "
                f"a torchplug plugin registers with {instead}") in str(error.value)
    assert not hasattr(torch.ops.loading_torch_macros, "twice")
    assert_add_untouched()


SHARED_HEADER = """#pragma once
#include <torchplug/core/library.h>
inline const torchplug::core::OpDef kThrice{"loading_headers::thrice(Tensor x) -> Tensor", {at::kFloat}, "3 x"};
constexpr float kFactor = 3;
"""
THRICE_CPP = """#include "shared.h"
#include <ATen/TensorOperators.h>
namespace { at::Tensor thrice_cpu(const at::Tensor& x) { kThrice.check_dtypes({TORCHPLUG_ARG(x)}); return x * kFactor; } }
TORCHPLUG_LIBRARY(loading_headers, m) { m.define(kThrice); }
TORCHPLUG_LIBRARY_IMPL(loading_headers, CPU, m) { m.impl("thrice", &thrice_cpu); }
"""
THRICE_CUDA = """#include "shared.h"
#include <torchplug/core/launch.cuh>
#include <ATen/ops/empty_like.h>
namespace {
__global__ void thrice_kernel(int64_t n, const float* x, float* out) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, n) { out[i] = x[i] * kFactor; }
}
at::Tensor thrice_cuda(const at::Tensor& x) {
  kThrice.check_dtypes({TORCHPLUG_ARG(x)});
  const c10::cuda::CUDAGuard guard(x.device());
  const auto in = x.contiguous();
  auto out = at::empty_like(in);
  torchplug::core::launch(thrice_kernel, in.numel(), in.numel(), in.const_data_ptr<float>(),
                          out.mutable_data_ptr<float>());
  return out;
}
}  // namespace
TORCHPLUG_LIBRARY_IMPL(loading_headers, CUDA, m) { m.impl("thrice", &thrice_cuda); }
"""


def test_inline_sources_share_a_header() -> None:
    """The C++ and the CUDA source include one header, which declares the op
    and the factor both kernels apply. Without CUDA kernels in torchplug the
    CUDA source is left out, with a warning."""
    built_without_cuda = (contextlib.nullcontext() if torchplug.with_cuda
                          else pytest.warns(UserWarning, match="built without its .cu sources"))
    with built_without_cuda:
        torchplug.load_inline("loading_headers", THRICE_CPP, THRICE_CUDA, headers={"shared.h": SHARED_HEADER})
    (info,) = [i for i in torchplug.registry() if i.namespace == "loading_headers"]
    assert set(info.backends) == ({"CPU", "CUDA"} if torchplug.with_cuda else {"CPU"})
    devices = ["cpu", "cuda"] if torchplug.with_cuda and torch.cuda.is_available() else ["cpu"]
    for device in devices:
        x = torch.arange(5.0, device=device)
        torch.testing.assert_close(torch.ops.loading_headers.thrice(x), x * 3, rtol=0, atol=0)


def test_inline_headers_are_part_of_the_cache_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An edited header builds anew: it is written to a new source folder, whose files key the build."""
    monkeypatch.setenv("TORCHPLUG_CACHE_DIR", str(tmp_path))
    sources = []
    monkeypatch.setattr(torchplug.jit, "load", lambda name, paths, **_: sources.append(paths) or name)
    for value in ("1", "2"):
        torchplug.load_inline("loading_key", '#include "value.h"\n', headers={"value.h": f"constexpr int kValue = {value};"})
    (first,), (second,) = sources
    assert first.parent != second.parent
    assert (second.parent / "value.h").read_text() == "constexpr int kValue = 2;"
    assert first.read_text() == second.read_text() == '#include "value.h"\n'


@pytest.mark.parametrize("filename", ["include/value.h", "value.txt", "../value.h"])
def test_inline_header_names_are_file_names(filename: str) -> None:
    with pytest.raises(ValueError, match=rf"plugin 'loading_names': argument 'headers' takes file names .*'{filename}'"):
        torchplug.load_inline("loading_names", "", headers={filename: ""})
