#pragma once

// A family of ops with one op per reduction (scatter_sum, scatter_mean, ...):
// each op an OpDef written out where the family declares it, so that its
// schema is found by its name,
//
//   inline const core::ReductionOps<core::SumPolicy, core::MaxPolicy> kScale{{
//       core::OpDef{"myplug::scale_sum(Tensor src, Tensor indptr) -> Tensor", kDtypes, "..."},
//       core::OpDef{"myplug::scale_max(Tensor src, Tensor indptr) -> (Tensor, Tensor)", kDtypes, "..."},
//   }};
//
// and everything else read from it: the definitions (define_all), a kernel
// per policy (for_each with of<Policy>()), and the op a user names by its
// reduction (visit, through kReductionNames).

#include "torchplug/core/library.h"
#include "torchplug/core/reduce/policy.h"
#include "torchplug/core/registry.h"

#include <c10/util/Exception.h>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace torchplug::core {

template <typename... Policies>
class ReductionOps {
 public:
  static constexpr size_t kSize = sizeof...(Policies);

  // One OpDef per policy, in the order of Policies.
  explicit ReductionOps(std::array<OpDef, kSize> defs) : defs_(std::move(defs)) {}

  template <typename Policy>
  const OpDef& of() const {
    constexpr size_t i = index_of<Policy>();
    static_assert(i < kSize, "ReductionOps: the family has no op for this policy");
    return defs_[i];
  }

  // Gives every op's schema to the dispatcher and its OpDef to the registry.
  void define_all(Library& m) const {
    for (const auto& def : defs_) m.define(def);
  }

  // fn(Policy{}) for each policy of the family.
  template <typename Fn>
  static void for_each(Fn&& fn) {
    Reductions<Policies...>::for_each(std::forward<Fn>(fn));
  }

  // fn(Policy{}) for the policy that `reduce` names (kReductionNames); a
  // ValueError naming `op` and the family's reductions for any other name.
  template <typename Fn>
  static auto visit(const char* op, std::string_view reduce, Fn&& fn) {
    using R = decltype(fn(std::declval<First>()));
    const auto named = reduce_by_name(reduce);
    std::optional<R> result;
    ((named == Policies::kReduce && (result.emplace(fn(Policies{})), true)) || ...);
    TORCH_CHECK_VALUE(result.has_value(), op, ": argument 'reduce' must be one of ", names(), ", got '",
                      reduce, "'");
    return std::move(*result);
  }

  // The names the family's reductions take, quoted: "'sum', 'add', 'mean'".
  static std::string names() {
    std::string all;
    for (const auto& entry : kReductionNames) {
      if (!((entry.reduce == Policies::kReduce) || ...)) continue;
      all += all.empty() ? "'" : ", '";
      all += entry.name;
      all += "'";
    }
    return all;
  }

 private:
  using First = std::tuple_element_t<0, std::tuple<Policies...>>;

  // Policy's position in Policies; kSize when it is not one of them.
  template <typename Policy>
  static constexpr size_t index_of() {
    constexpr bool matches[] = {std::is_same_v<Policy, Policies>...};
    for (size_t i = 0; i < kSize; ++i) {
      if (matches[i]) return i;
    }
    return kSize;
  }

  std::array<OpDef, kSize> defs_;
};

// The ReductionOps of a Reductions list; AllReductionOps: one op per reduction.
template <typename List>
struct ReductionOpsOf;
template <typename... Policies>
struct ReductionOpsOf<Reductions<Policies...>> {
  using type = ReductionOps<Policies...>;
};
using AllReductionOps = ReductionOpsOf<AllReductions>::type;

}  // namespace torchplug::core
