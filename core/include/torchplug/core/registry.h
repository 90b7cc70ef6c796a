#pragma once

// The registry: one list of every torchplug op, read by C++ (Registry) and by
// Python (torchplug.registry()). A plugin defines each of its ops once, with
//
//   TORCH_LIBRARY_FRAGMENT(torchplug, m) {
//     torchplug::core::define(m, {.schema = "...", .plugin = "scatter", .dtypes = {...}, .doc = "..."});
//   }
//
// which gives the schema to the dispatcher and the description to the registry.
// What the dispatcher knows (which backends have kernels, whether an autograd
// kernel exists) is read from it when asked, so it cannot go stale.

#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace torchplug::core {

// What a plugin says about one op when it defines it.
struct OpDef {
  std::string schema;  // "scatter_sum(Tensor src, ...) -> Tensor"
  std::string plugin;  // the folder the op lives in
  std::vector<c10::ScalarType> dtypes;
  std::string doc;     // one line
};

// One op as the registry reports it.
struct OpInfo {
  std::string name;                   // "scatter_sum": callable as torch.ops.torchplug.<name>
  std::string schema;
  std::string plugin;
  std::vector<std::string> backends;  // dispatch keys with a kernel: "CPU", "CUDA", "Meta"
  bool differentiable = false;        // an Autograd kernel is registered
  std::vector<std::string> dtypes;
  std::string doc;
};

class Registry {
 public:
  static Registry& instance();

  void add(OpDef def);
  std::vector<OpInfo> ops() const;
  std::optional<OpInfo> find(const std::string& name) const;

 private:
  Registry() = default;
  mutable std::mutex mutex_;
  std::vector<OpDef> defs_;
};

// Defines the op's schema in `m` and adds it to the registry.
void define(torch::Library& m, OpDef def);

}  // namespace torchplug::core
