#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

namespace torchplug::core {
namespace {

// "name.overload(...) -> ..." gives "name.overload"; the overload is optional.
std::string name_of(const std::string& schema) {
  const auto end = schema.find('(');
  TORCH_CHECK(end != std::string::npos && end > 0, "torchplug registry: malformed schema '", schema, "'");
  return schema.substr(0, end);
}

c10::OperatorName operator_name(const std::string& name) {
  const auto dot = name.find('.');
  if (dot == std::string::npos) return {"torchplug::" + name, ""};
  return {"torchplug::" + name.substr(0, dot), name.substr(dot + 1)};
}

OpInfo describe(const OpDef& def) {
  OpInfo info;
  info.name = name_of(def.schema);
  info.schema = def.schema;
  info.plugin = def.plugin;
  info.doc = def.doc;
  for (auto dtype : def.dtypes) info.dtypes.emplace_back(c10::toString(dtype));

  auto handle = c10::Dispatcher::singleton().findOp(operator_name(info.name));
  if (!handle) return info;
  for (auto [key, label] : {std::pair{c10::DispatchKey::CPU, "CPU"},
                            std::pair{c10::DispatchKey::CUDA, "CUDA"},
                            std::pair{c10::DispatchKey::Meta, "Meta"}}) {
    if (handle->hasKernelForDispatchKey(key)) info.backends.emplace_back(label);
  }
  info.differentiable = handle->hasKernelForDispatchKey(c10::DispatchKey::Autograd) ||
                        handle->hasKernelForDispatchKey(c10::DispatchKey::AutogradCPU) ||
                        handle->hasKernelForDispatchKey(c10::DispatchKey::AutogradCUDA);
  return info;
}

}  // namespace

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add(OpDef def) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto name = name_of(def.schema);
  for (const auto& existing : defs_) {
    TORCH_CHECK(name_of(existing.schema) != name, "torchplug registry: op '", name,
                "' is defined twice (plugins '", existing.plugin, "' and '", def.plugin, "')");
  }
  defs_.push_back(std::move(def));
}

std::vector<OpInfo> Registry::ops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<OpInfo> infos;
  infos.reserve(defs_.size());
  for (const auto& def : defs_) infos.push_back(describe(def));
  return infos;
}

std::optional<OpInfo> Registry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& def : defs_) {
    if (name_of(def.schema) == name) return describe(def);
  }
  return std::nullopt;
}

void define(torch::Library& m, OpDef def) {
  m.def(def.schema.c_str());
  Registry::instance().add(std::move(def));
}

}  // namespace torchplug::core
