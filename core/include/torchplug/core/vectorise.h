#pragma once

// CPU loops the compiler vectorises. TORCHPLUG_VECTORISED_CLONES before a
// CPU function compiles it for AVX-512, AVX2 and baseline x86-64, the variant
// picked when the library loads: the build targets baseline x86-64, and GCC
// vectorises min's and max's selects of a value and its position only from
// AVX2 on. Elsewhere it is empty.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define TORCHPLUG_VECTORISED_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TORCHPLUG_VECTORISED_CLONES
#endif

#include <ATen/OpMathType.h>

#include <cstdint>

namespace torchplug::core {

// sum_f a[f] * b[f] in the math type (float for float16 and bfloat16), in
// kLanes interleaved partial sums the compiler keeps in one vector register:
// a single running sum is a chain it may not reorder.
template <typename scalar_t>
TORCHPLUG_VECTORISED_CLONES at::opmath_type<scalar_t> dot(const scalar_t* __restrict__ a,
                                                          const scalar_t* __restrict__ b, int64_t F) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int kLanes = 16;
  acc_t partial[kLanes] = {};
  int64_t f = 0;
  for (; f + kLanes <= F; f += kLanes) {
    for (int k = 0; k < kLanes; ++k) partial[k] += static_cast<acc_t>(a[f + k]) * static_cast<acc_t>(b[f + k]);
  }
  for (int k = 0; f < F; ++f, ++k) partial[k] += static_cast<acc_t>(a[f]) * static_cast<acc_t>(b[f]);
  acc_t sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += partial[k];
  return sum;
}

}  // namespace torchplug::core
