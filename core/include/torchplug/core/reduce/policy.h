#pragma once

// Reduction policies: how the values that land in one output slot combine.
// Every strategy kernel of a reduction op (scatter, segment, spmm), on the CPU
// and on CUDA, is a template over one of these, so a strategy is written once
// and a reduction once:
//
//   template <typename Policy, typename T>
//   void reduce_run(T* slot, const T* values, int64_t n) {
//     T acc = Policy::template identity<T>();
//     for (int64_t i = 0; i < n; ++i) Policy::combine(acc, values[i]);
//     *slot = acc;
//   }
//
// A policy says:
//   identity<T>()   the value a slot's combine() starts from (nothing combined yet)
//   empty<T>()      what a slot that no value reached holds in the result
//   combine(a, v)   a = a (op) v; associative and commutative
//   kAtomic         how CUDA kernels combine into memory many threads write
//                   (core/reduction.cuh): kAdd is one (vector) atomic add,
//                   kMinMax the hardware's integer min or max atomic (on a
//                   floating value's bits), kCas a compare-and-swap loop (a CAS
//                   per contended update, none where combine leaves the slot
//                   unchanged)
//   kHasArg         the op also returns, per slot, the smallest source position
//                   whose value is the result (min, max)
//   kDividesByCount finalize() divides by the number of values combined (mean)
//
// The table of reductions, AllReductions, lists each policy once and
// kReductionNames the names users give them; every family's ops, dispatch and
// per-reduction translation units follow them (family.h). A new reduction is
// a policy here plus its rows there.

#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

namespace torchplug::core {

enum class Reduce : int8_t { kSum, kMean, kMul, kMin, kMax };

enum class AtomicKind : int8_t { kAdd, kMinMax, kCas };

template <typename T>
C10_HOST_DEVICE inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

struct SumPolicy {
  static constexpr Reduce kReduce = Reduce::kSum;
  static constexpr AtomicKind kAtomic = AtomicKind::kAdd;
  static constexpr bool kHasArg = false;
  static constexpr bool kDividesByCount = false;

  // +0.0, as for a sum into zeros (index_add_): -0.0 sources alone give +0.0.
  template <typename T>
  C10_HOST_DEVICE static constexpr T identity() {
    return T(0);
  }
  template <typename T>
  C10_HOST_DEVICE static constexpr T empty() {
    return T(0);
  }
  template <typename T>
  C10_HOST_DEVICE static void combine(T& acc, T value) {
    acc += value;
  }
};

// The sum, divided by the count (at least 1) when the result is written;
// integers floor-divide, as torch_scatter does.
struct MeanPolicy : SumPolicy {
  static constexpr Reduce kReduce = Reduce::kMean;
  static constexpr bool kDividesByCount = true;

  template <typename T>
  C10_HOST_DEVICE static T finalize(T sum, int64_t count) {
    if (count < 1) count = 1;
    if constexpr (std::is_floating_point_v<T>) {
      return sum / static_cast<T>(count);
    } else {
      const T divisor = static_cast<T>(count);
      T quotient = sum / divisor;
      if (sum % divisor != 0 && sum < 0) --quotient;  // floor, divisor > 0
      return quotient;
    }
  }
};

struct MulPolicy {
  static constexpr Reduce kReduce = Reduce::kMul;
  static constexpr AtomicKind kAtomic = AtomicKind::kCas;
  static constexpr bool kHasArg = false;
  static constexpr bool kDividesByCount = false;

  template <typename T>
  C10_HOST_DEVICE static constexpr T identity() {
    return T(1);
  }
  template <typename T>
  C10_HOST_DEVICE static constexpr T empty() {
    return T(1);
  }
  template <typename T>
  C10_HOST_DEVICE static void combine(T& acc, T value) {
    acc *= value;
  }
};

// min and max. NaN propagates: a NaN wins against any number, as in
// torch.amax. The value of a result does not depend on the order of combine(),
// but for which of -0.0 and +0.0 (equal) or which NaN comes back; which
// position it came from is the arg, the smallest one that holds it.
template <bool kIsMax>
struct ExtremePolicy {
  static constexpr Reduce kReduce = kIsMax ? Reduce::kMax : Reduce::kMin;
  static constexpr AtomicKind kAtomic = AtomicKind::kMinMax;
  static constexpr bool kHasArg = true;
  static constexpr bool kDividesByCount = false;

  template <typename T>
  C10_HOST_DEVICE static constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) {
      return kIsMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return kIsMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  template <typename T>
  C10_HOST_DEVICE static constexpr T empty() {
    return T(0);
  }
  // Whether `value` takes the place of `acc`: it is beyond acc, or NaN where
  // acc is not. On the GPU one unordered comparison (true for a NaN value)
  // and one NaN test: its segment kernels are bound by the instructions they
  // issue per value. GCC vectorises that form several times slower than the
  // ordered one (docs/benchmarks.md).
  template <typename T>
  C10_HOST_DEVICE static bool wins(T value, T acc) {
#ifdef __CUDA_ARCH__
    return !(kIsMax ? value <= acc : value >= acc) && !is_nan(acc);
#else
    return (kIsMax ? value > acc : value < acc) || (is_nan(value) && !is_nan(acc));
#endif
  }
  template <typename T>
  C10_HOST_DEVICE static void combine(T& acc, T value) {
    if (wins(value, acc)) acc = value;
  }
  // Whether the value at a source position is the result: the arg passes
  // keep the smallest such position.
  template <typename T>
  C10_HOST_DEVICE static bool holds(T value, T result) {
    return value == result || (is_nan(value) && is_nan(result));
  }
};

using MinPolicy = ExtremePolicy<false>;
using MaxPolicy = ExtremePolicy<true>;

// A slot's result from what `count` sources combined into `value`, for
// strategies that know the count: the empty value when nothing reached the
// slot and it had no value of its own (`initial`: out's, when reducing into
// it), mean's division otherwise.
template <typename Policy, typename T>
C10_HOST_DEVICE T finish(T value, int64_t count, bool initial) {
  if (count == 0 && !initial) return Policy::template empty<T>();
  if constexpr (Policy::kDividesByCount) {
    return Policy::finalize(value, count);
  } else {
    return value;
  }
}

// The value a partial (a thread's copy of the output, a block's share of a
// row) starts from: combined into a slot, it leaves the slot as it is. The
// identity, but -0.0 for the sums, where +0.0 would turn a -0.0 of out= that
// no source reaches into +0.0.
template <typename Policy, typename T>
C10_HOST_DEVICE constexpr T partial_identity() {
  if constexpr ((Policy::kReduce == Reduce::kSum || Policy::kReduce == Reduce::kMean) &&
                std::is_floating_point_v<T>) {
    return T(-0.0);
  } else {
    return Policy::template identity<T>();
  }
}

// A list of policies: a family's reductions. for_each calls fn(Policy{})
// for each (policies are empty types).
template <typename... Policies>
struct Reductions {
  template <typename Fn>
  static void for_each(Fn&& fn) {
    (fn(Policies{}), ...);
  }
};

using AllReductions = Reductions<SumPolicy, MeanPolicy, MulPolicy, MinPolicy, MaxPolicy>;

// Every name a user may give a reduction (torch_scatter's: "add" is sum).
struct ReductionName {
  const char* name;
  Reduce reduce;
};
inline constexpr ReductionName kReductionNames[] = {
    {"sum", Reduce::kSum}, {"add", Reduce::kSum}, {"mean", Reduce::kMean},
    {"mul", Reduce::kMul}, {"min", Reduce::kMin}, {"max", Reduce::kMax}};

// The reduction `name` names; nullopt for a name no reduction has.
std::optional<Reduce> reduce_by_name(std::string_view name);

}  // namespace torchplug::core
