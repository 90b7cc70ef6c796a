#pragma once

// The atomic form of each reduction policy (core/reduction.h), for CUDA
// strategies whose threads combine into the same memory:
//
//   core::atomic_combine<Policy>(out + slot, value);
//   core::atomic_combine_vector<Policy>(out + slot, values);   // N consecutive values
//   core::atomic_min_position(arg + slot, e);                  // the arg passes
//
// kAdd policies add (float vectors as one 16- or 8-byte atomic on sm_90,
// core/atomic.cuh). kCas policies run a compare-and-swap loop over the value's
// bits, which reads first and stops as soon as combine() leaves the slot as it
// is: a max into a slot that already holds a larger value costs one load.
// Integer min and max use the hardware's own atomics. Values are 4 or 8 bytes:
// float16 and bfloat16 reduce into a float accumulator.

#include "torchplug/core/atomic.cuh"
#include "torchplug/core/reduction.h"

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
  } else if constexpr (Policy::kHasArg && std::is_same_v<T, int32_t>) {
    Policy::kReduce == Reduce::kMax ? atomicMax(address, value) : atomicMin(address, value);
  } else if constexpr (Policy::kHasArg && std::is_same_v<T, int64_t>) {
    auto* as_ll = reinterpret_cast<long long*>(address);
    Policy::kReduce == Reduce::kMax ? atomicMax(as_ll, static_cast<long long>(value))
                                    : atomicMin(as_ll, static_cast<long long>(value));
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

}  // namespace torchplug::core
