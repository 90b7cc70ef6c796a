#pragma once

// Atomic adds for CUDA kernels: one value, or N consecutive values at once.
// On Hopper (sm_90) four floats go as one 16-byte vector atomic
// (red.global.add.v4.f32), two as one 8-byte one (v2.f32): one request to the
// L2 where separate atomics from a warp's lanes to scattered rows are one
// request per value (docs/benchmarks.md has the figures).

#include <ATen/cuda/Atomic.cuh>

namespace torchplug::core {

template <typename T>
__device__ __forceinline__ void atomic_add(T* address, T value) {
  gpuAtomicAdd(address, value);
}

// Adds `value` at `address` and returns what was there before.
__device__ __forceinline__ int32_t fetch_add(int32_t* address, int32_t value) {
  return atomicAdd(address, value);
}
__device__ __forceinline__ int64_t fetch_add(int64_t* address, int64_t value) {
  return static_cast<int64_t>(atomicAdd(reinterpret_cast<unsigned long long*>(address),
                                        static_cast<unsigned long long>(value)));
}

// address[k] += values[k] for k < N; when T is float, `address` must be
// aligned to 4 values if N is a multiple of 4, and to 2 if N is even.
template <typename T, int N>
__device__ __forceinline__ void atomic_add_vector(T* address, const T (&values)[N]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVector4 = std::is_same_v<T, float> && N % 4 == 0;
  constexpr bool kVector2 = std::is_same_v<T, float> && N % 2 == 0;
#else
  constexpr bool kVector4 = false;
  constexpr bool kVector2 = false;
#endif
  if constexpr (kVector4) {
#pragma unroll
    for (int k = 0; k < N; k += 4) {
      atomicAdd(reinterpret_cast<float4*>(address + k),
                make_float4(values[k], values[k + 1], values[k + 2], values[k + 3]));
    }
  } else if constexpr (kVector2) {
#pragma unroll
    for (int k = 0; k < N; k += 2) {
      atomicAdd(reinterpret_cast<float2*>(address + k), make_float2(values[k], values[k + 1]));
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) gpuAtomicAdd(address + k, values[k]);
  }
}

}  // namespace torchplug::core
