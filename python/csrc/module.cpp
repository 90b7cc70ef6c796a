// torchplug._C: exposes torchplug::core::Registry to Python.

#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/reduce/policy.h"
#include "torchplug/core/registry.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

namespace py = pybind11;

namespace {

py::dict to_dict(const torchplug::core::OpInfo& info) {
  py::dict d;
  d["namespace"] = info.ns;
  d["name"] = info.name;
  d["schema"] = info.schema;
  d["plugin"] = info.plugin;
  d["backends"] = info.backends;
  d["differentiable"] = info.differentiable;
  d["dtypes"] = info.dtypes;
  d["doc"] = info.doc;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchplug's C++ registry";
  m.attr("__version__") = TORCHPLUG_VERSION;
#ifdef TORCHPLUG_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
  m.def(
      "registry",
      [] {
        py::list ops;
        for (const auto& info : torchplug::core::Registry::instance().ops()) ops.append(to_dict(info));
        return ops;
      },
      "Every registered op, as a list of dicts (namespace, name, schema, plugin, backends, "
      "differentiable, dtypes, doc).");
  m.def(
      "reductions",
      [] {
        // The table of core/reduce/policy.h: each reduction, the other names
        // it answers to, and whether its ops return an arg.
        py::list reductions;
        torchplug::core::AllReductions::for_each([&](auto policy) {
          using Policy = decltype(policy);
          py::list names;
          for (const auto& entry : torchplug::core::kReductionNames) {
            if (entry.reduce == Policy::kReduce) names.append(entry.name);
          }
          py::dict reduction;
          reduction["name"] = names[0];
          reduction["aliases"] = names[py::slice(1, py::len(names), 1)];
          reduction["arg"] = Policy::kHasArg;
          reductions.append(reduction);
        });
        return reductions;
      },
      "The reductions (sum, mean, mul, min, max) as dicts: name, aliases (a reduce= argument "
      "takes either), arg (whether the ops return one).");
  // torchplug.load_plugin: the library's TORCHPLUG_LIBRARY blocks are held from
  // begin to commit, then registered all or none (torchplug/core/library.h).
  m.def("_begin_guarded_load", &torchplug::core::begin_guarded_load, py::arg("path"));
  m.def("_commit_guarded_load", &torchplug::core::commit_guarded_load);
  m.def("_abort_guarded_load", &torchplug::core::abort_guarded_load);
  m.def("set_cuda_checks", &torchplug::core::set_cuda_checks, py::arg("enabled"),
        "Turns checked mode for CUDA kernels on or off.");
  m.def("cuda_checks_enabled", &torchplug::core::cuda_checks_enabled,
        "Whether CUDA kernels validate index values before writing.");
  m.def(
      "validates_indices",
      [](const std::string& device) { return torchplug::core::validates_indices(c10::Device(device)); },
      py::arg("device"), "Whether ops on `device` validate index values before writing.");
}
