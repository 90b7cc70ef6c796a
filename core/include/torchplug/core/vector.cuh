#pragma once

// Choosing and using vector widths in CUDA kernels that step through rows of
// `inner` values:
//
//   core::with_vector_width<scalar_t>(inner, {src, out}, [&](auto w) {
//     constexpr int V = decltype(w)::value;            // 16 bytes at most
//     core::launch(my_kernel<scalar_t, V>, items / V, ...);
//   });
//
//   at::opmath_type<T> values[V];
//   core::load_as<T, V>(src + i, values);              // one aligned load, converted

#include "torchplug/core/launch.cuh"

#include <ATen/OpMathType.h>

#include <initializer_list>
#include <type_traits>

namespace torchplug::core {

// V values at ptr, loaded as one vector and converted to T's math type.
template <typename T, int V>
__device__ __forceinline__ void load_as(const T* ptr, at::opmath_type<T> (&values)[V]) {
  const auto loaded = *reinterpret_cast<const Vector<T, V>*>(ptr);
#pragma unroll
  for (int k = 0; k < V; ++k) values[k] = static_cast<at::opmath_type<T>>(loaded.val[k]);
}

// The widest vector of V values (16 bytes at most) that divides inner and fits
// the alignment of every pointer the kernel steps through.
template <typename scalar_t>
int vector_width(int64_t inner, std::initializer_list<const void*> pointers) {
  for (int width = kVectorWidth<scalar_t>; width > 1; width /= 2) {
    bool fits = inner % width == 0;
    for (const void* ptr : pointers) fits = fits && is_aligned(ptr, width * sizeof(scalar_t));
    if (fits) return width;
  }
  return 1;
}

namespace detail {
template <int... Widths, typename Body>
void for_width(int width, Body body) {
  ((width == Widths ? (body(std::integral_constant<int, Widths>{}), true) : false) || ...);
}
}  // namespace detail

// Calls launch(std::integral_constant<int, V>) for V = width, a power of two
// up to kMaxWidth; only those widths are compiled.
template <typename scalar_t, int kMaxWidth = kVectorWidth<scalar_t>, typename Launch>
void with_width(int width, Launch launch) {
  detail::for_width<16, 8, 4, 2, 1>(width, [&](auto w) {
    constexpr int V = decltype(w)::value;
    if constexpr (V <= kMaxWidth) launch(w);
  });
}

// with_width() at the widest V (16 bytes at most) that divides inner and keeps
// every pointer aligned.
template <typename scalar_t, typename Launch>
void with_vector_width(int64_t inner, std::initializer_list<const void*> pointers, Launch launch) {
  with_width<scalar_t>(vector_width<scalar_t>(inner, pointers), launch);
}

}  // namespace torchplug::core
