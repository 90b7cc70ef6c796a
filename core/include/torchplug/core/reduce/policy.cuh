#pragma once

// The atomic form of each reduction policy (core/reduction.h), for CUDA
// strategies whose threads combine into the same memory:
//
//   core::atomic_combine<Policy>(out + slot, value);
//   core::atomic_combine_vector<Policy>(out + slot, values);   // N consecutive values
//   core::atomic_min_position(arg + slot, e);                  // the arg passes
//
// and its register form for the kernels that combine a row's values in one
// thread (row kernels, hub passes): core::combine_at<Policy, kInOrder>(sum,
// arg, value, position).
//
// kAdd policies add (float vectors as one 16- or 8-byte atomic on sm_90,
// core/atomic.cuh). kMinMax policies take the hardware's integer min or max
// atomic: on integers directly, on floating values on their bits (below).
// kCas policies run a compare-and-swap loop over the value's bits, which reads
// first and stops as soon as combine() leaves the slot as it is. Values are 4
// or 8 bytes: float16 and bfloat16 reduce into a float accumulator.

#include "torchplug/core/atomic.cuh"
#include "torchplug/core/reduce/policy.h"

#include <cstdint>
#include <type_traits>

namespace torchplug::core {

namespace detail {

template <typename T>
using CasBits = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;

template <typename T>
__device__ __forceinline__ CasBits<T> to_bits(T value) {
  CasBits<T> bits;
  memcpy(&bits, &value, sizeof(T));
  return bits;
}

template <typename T>
__device__ __forceinline__ T from_bits(CasBits<T> bits) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  return value;
}

// The min or max of a floating value into *address with integer atomics: a
// non-negative value's bits order as a signed integer, a negative value's in
// reverse as an unsigned one, so each sign takes one atomic. A NaN is stored as
// the one pattern that wins under both orders (all ones but the sign for max,
// all ones for min). A NaN already in the slot with other bits (out's own)
// could lose to a number that way, so an atomic that finds one stores the
// winning pattern after it.
template <bool kIsMax, typename T>
__device__ __forceinline__ void atomic_extreme_bits(T* address, T value) {
  using Bits = CasBits<T>;
  using SignedBits = std::make_signed_t<Bits>;
  constexpr Bits kSign = Bits{1} << (8 * sizeof(T) - 1);
  constexpr Bits kNan = kIsMax ? ~kSign : ~Bits{0};
  const auto issue = [address](Bits bits) -> Bits {
    if (bits & kSign) {
      auto* as_unsigned = reinterpret_cast<Bits*>(address);
      return kIsMax ? atomicMin(as_unsigned, bits) : atomicMax(as_unsigned, bits);
    }
    auto* as_signed = reinterpret_cast<SignedBits*>(address);
    const auto wanted = static_cast<SignedBits>(bits);
    return static_cast<Bits>(kIsMax ? atomicMax(as_signed, wanted) : atomicMin(as_signed, wanted));
  };
  const Bits bits = is_nan(value) ? kNan : to_bits(value);
  const Bits before = issue(bits);
  if (before != kNan && is_nan(from_bits<T>(before))) issue(kNan);
}

template <typename Policy, typename T>
__device__ __forceinline__ void atomic_cas_combine(T* address, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "CAS combine on 4- or 8-byte values");
  auto* bits = reinterpret_cast<CasBits<T>*>(address);
  CasBits<T> seen = to_bits(*reinterpret_cast<volatile T*>(address));
  while (true) {
    T next = from_bits<T>(seen);
    Policy::combine(next, value);
    const CasBits<T> wanted = to_bits(next);
    if (wanted == seen) return;
    const CasBits<T> before = atomicCAS(bits, seen, wanted);
    if (before == seen) return;
    seen = before;
  }
}

}  // namespace detail

template <typename Policy, typename T>
__device__ __forceinline__ void atomic_combine(T* address, T value) {
  if constexpr (Policy::kAtomic == AtomicKind::kAdd) {
    atomic_add(address, value);
  } else if constexpr (Policy::kAtomic == AtomicKind::kMinMax && std::is_same_v<T, int32_t>) {
    Policy::kReduce == Reduce::kMax ? atomicMax(address, value) : atomicMin(address, value);
  } else if constexpr (Policy::kAtomic == AtomicKind::kMinMax && std::is_same_v<T, int64_t>) {
    auto* as_ll = reinterpret_cast<long long*>(address);
    Policy::kReduce == Reduce::kMax ? atomicMax(as_ll, static_cast<long long>(value))
                                    : atomicMin(as_ll, static_cast<long long>(value));
  } else if constexpr (Policy::kAtomic == AtomicKind::kMinMax) {
    detail::atomic_extreme_bits<Policy::kReduce == Reduce::kMax>(address, value);
  } else {
    detail::atomic_cas_combine<Policy>(address, value);
  }
}

// address[k] (op)= values[k] for k < N, with the alignment atomic_add_vector asks.
template <typename Policy, typename T, int N>
__device__ __forceinline__ void atomic_combine_vector(T* address, const T (&values)[N]) {
  if constexpr (Policy::kAtomic == AtomicKind::kAdd) {
    atomic_add_vector(address, values);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) atomic_combine<Policy>(address + k, values[k]);
  }
}

// *address = min(*address, position): the smallest source position wins.
__device__ __forceinline__ void atomic_min_position(int64_t* address, int64_t position) {
  atomicMin(reinterpret_cast<long long*>(address), static_cast<long long>(position));
}

// sum (op)= value; with an arg (min, max), arg follows sum: the smallest
// position of a value holding it. In source order (kInOrder) that is the
// first value to win, and no position is compared: the caller starts arg at
// the row's first position, which holds the identity if no value wins. Min and
// max with arg are bound by instructions, not memory.
template <typename Policy, bool kInOrder, typename acc_t, typename offset_t>
__device__ __forceinline__ void combine_at(acc_t& sum, offset_t& arg, acc_t value, offset_t position) {
  if constexpr (Policy::kHasArg) {
    if (Policy::wins(value, sum) || (!kInOrder && Policy::holds(value, sum) && position < arg)) {
      sum = value;
      arg = position;
    }
  } else {
    Policy::combine(sum, value);
  }
}

}  // namespace torchplug::core
