#pragma once

// L2 cache hints for CUDA kernels.
//
//   torchplug::core::store_evict_last(out + i, value);   // a later kernel reads it back
//
// A store marked evict-last stays in L2 ahead of streaming traffic, so that
// scattered stores into one array merge into whole sectors there before they
// reach memory, and the next kernel finds the array in L2. Loads read for the
// last time can go the other way with __ldcs (evict first).

#include <cstdint>
#include <type_traits>

namespace torchplug::core {

// *address = value for a 4- or 8-byte integer, marked evict-last on sm_80 and later.
template <typename T>
__device__ __forceinline__ void store_evict_last(T* address, T value) {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  if constexpr (sizeof(T) == 4) {
    asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;" ::"l"(address), "r"(value), "l"(policy)
                 : "memory");
  } else {
    asm volatile("st.global.L2::cache_hint.b64 [%0], %1, %2;" ::"l"(address), "l"(value), "l"(policy)
                 : "memory");
  }
#else
  *address = value;
#endif
}

}  // namespace torchplug::core
