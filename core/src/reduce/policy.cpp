#include "torchplug/core/reduce/policy.h"

namespace torchplug::core {

std::optional<Reduce> reduce_by_name(std::string_view name) {
  for (const auto& entry : kReductionNames) {
    if (name == entry.name) return entry.reduce;
  }
  return std::nullopt;
}

}  // namespace torchplug::core
