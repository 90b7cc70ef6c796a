#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace torchplug::core {
namespace {

// "ns::name.overload(...) -> ..." gives "ns::name.overload"; ns and overload are optional.
std::string name_of(const std::string& schema) {
  const auto end = schema.find('(');
  TORCH_CHECK(end != std::string::npos && end > 0, "torchplug registry: malformed schema '", schema, "'");
  return schema.substr(0, end);
}

// Splits "ns::rest" into {"ns", "rest"}; {"", text} when there is no "::" before the '('.
std::pair<std::string, std::string> split_namespace(const std::string& text) {
  const auto sep = text.find("::");
  if (sep == std::string::npos || sep > text.find('(')) return {"", text};
  return {text.substr(0, sep), text.substr(sep + 2)};
}

}  // namespace

c10::OperatorName parse_operator_name(const std::string& qualified) {
  const auto dot = qualified.find('.');
  return {qualified.substr(0, dot), dot == std::string::npos ? "" : qualified.substr(dot + 1)};
}

OpDef::OpDef(std::string schema_, std::vector<c10::ScalarType> dtypes_, std::string doc_)
    : schema(std::move(schema_)), dtypes(std::move(dtypes_)), doc(std::move(doc_)), name_(name_of(schema)) {}

void OpDef::check_dtypes(std::initializer_list<NamedTensor> tensors) const {
  for (const auto& [arg, tensor] : tensors) {
    // The name is built only for an error: this runs on every call.
    if (!tensor->defined() || std::find(dtypes.begin(), dtypes.end(), tensor->scalar_type()) == dtypes.end()) {
      check_dtype_in(name().c_str(), arg, *tensor, dtypes);
    }
  }
}

OpInfo Registry::describe(const Entry& entry) {
  OpInfo info;
  info.ns = entry.ns;
  info.name = entry.name;
  info.schema = entry.schema;
  info.plugin = entry.plugin;
  info.doc = entry.doc;
  for (auto dtype : entry.dtypes) info.dtypes.emplace_back(c10::toString(dtype));

  auto handle = c10::Dispatcher::singleton().findOp(parse_operator_name(info.ns + "::" + info.name));
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

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add(const std::string& ns, const std::string& plugin, const OpDef& def) {
  auto [declared_ns, schema] = split_namespace(def.schema);
  TORCH_CHECK(declared_ns.empty() || declared_ns == ns, "torchplug registry: op '", def.name(),
              "' is defined in a library of namespace '", ns, "'");
  Entry entry{ns, name_of(schema), schema, plugin, def.dtypes, def.doc};
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& existing : entries_) {
    TORCH_CHECK(existing.ns != entry.ns || existing.name != entry.name, "torchplug registry: op '",
                ns, "::", entry.name, "' is defined twice (plugins '", existing.plugin, "' and '",
                plugin, "')");
  }
  entries_.push_back(std::move(entry));
}

std::vector<OpInfo> Registry::ops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<OpInfo> infos;
  infos.reserve(entries_.size());
  for (const auto& entry : entries_) infos.push_back(describe(entry));
  return infos;
}

std::optional<OpInfo> Registry::find(const std::string& name) const {
  auto [ns, bare] = split_namespace(name + "(");
  bare.pop_back();
  if (ns.empty()) ns = "torchplug";
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : entries_) {
    if (entry.ns == ns && entry.name == bare) return describe(entry);
  }
  return std::nullopt;
}

size_t Registry::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void Registry::truncate(size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (count < entries_.size()) entries_.resize(count);
}

}  // namespace torchplug::core
