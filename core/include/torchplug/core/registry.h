#pragma once

// The registry: one list of every op the loaded plugins define, read by C++
// (Registry) and by Python (torchplug.registry()). A plugin declares each op
// once, as an OpDef, and defines it in a TORCHPLUG_LIBRARY block
// (torchplug/core/library.h), which gives the schema to the dispatcher and the
// description to the registry. What the dispatcher knows (which backends have
// kernels, whether an autograd kernel exists) is read from it when asked, so
// it cannot go stale.

#include "torchplug/core/checks.h"

#include <ATen/core/operator_name.h>
#include <c10/core/ScalarType.h>

#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace torchplug::core {

// What a plugin declares about one op. Keep it as a constant next to the
// kernels: the dtype checks read the same list the registry reports.
struct OpDef {
  OpDef(std::string schema, std::vector<c10::ScalarType> dtypes, std::string doc);

  // "myplug::scale_add(Tensor a, ...) -> Tensor"; without "ns::", the
  // namespace of the TORCHPLUG_LIBRARY block that defines it.
  std::string schema;
  std::vector<c10::ScalarType> dtypes;
  std::string doc;  // one line

  // The op's name as the schema spells it: "myplug::scale_add" or "scale_add"
  // (read on every call, for errors: kept, not parsed each time).
  const std::string& name() const { return name_; }

  // Each tensor has one of `dtypes`; the error names the op and the argument.
  void check_dtypes(std::initializer_list<NamedTensor> tensors) const;

 private:
  std::string name_;
};

// "ns::name.overload" (the overload optional) as the dispatcher names it.
c10::OperatorName parse_operator_name(const std::string& qualified);

// One op as the registry reports it.
struct OpInfo {
  std::string ns;                     // "torchplug": callable as torch.ops.<ns>.<name>
  std::string name;                   // "scatter_sum" (with ".overload" if it has one)
  std::string schema;                 // without the namespace
  std::string plugin;                 // the plugin (library) that defines it
  std::vector<std::string> backends;  // dispatch keys with a kernel: "CPU", "CUDA", "Meta"
  bool differentiable = false;        // an Autograd kernel is registered
  std::vector<std::string> dtypes;
  std::string doc;

  std::string qualified_name() const { return ns + "::" + name; }
};

class Registry {
 public:
  static Registry& instance();

  // `def.schema` qualified or not, the op is filed under `ns`.
  void add(const std::string& ns, const std::string& plugin, const OpDef& def);
  std::vector<OpInfo> ops() const;
  // By "ns::name", or by bare name for an op of the torchplug namespace.
  std::optional<OpInfo> find(const std::string& name) const;

  // For a load that failed part-way (library.cpp): forget the ops added after
  // the first `count`.
  size_t size() const;
  void truncate(size_t count);

 private:
  struct Entry {
    std::string ns;
    std::string name;
    std::string schema;  // unqualified
    std::string plugin;
    std::vector<c10::ScalarType> dtypes;
    std::string doc;
  };
  static OpInfo describe(const Entry& entry);

  Registry() = default;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace torchplug::core
