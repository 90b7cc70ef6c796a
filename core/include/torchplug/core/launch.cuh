#pragma once

// CUDA launch utilities shared by every plugin's kernels.
//
//   const c10::cuda::CUDAGuard guard(src.device());           // the inputs' device
//   torchplug::core::launch(my_kernel, n, args...);            // current stream, checked
//   torchplug::core::launch_one_wave(my_kernel, n, args...);   // at most one wave of blocks
//   torchplug::core::launch_one_wave_chained(my_kernel, n, args...);  // set up while the kernel before runs
//   torchplug::core::resident_threads();                       // threads the device holds at once
//
//   __global__ void my_kernel(int64_t n, ...) {
//     TORCHPLUG_GRID_STRIDE_LOOP(i, n) { ... }                  // 64-bit, any n
//   }
//   __global__ void my_tiled_kernel(int64_t n, int32_t* next_tile, ...) {  // one wave
//     torchplug::core::for_each_tile(n, next_tile, [&](int64_t i) { ... });
//   }
//   __global__ void my_chained_kernel(...) {
//     torchplug::core::wait_for_previous_kernel();              // first, in every thread
//     ...
//   }

#include "torchplug/core/atomic.cuh"

#include <ATen/ceil_div.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>

namespace torchplug::core {

constexpr int kThreadsPerBlock = 256;

// One thread per item, as long as the grid's x dimension allows; grid-stride
// loops cover whatever is left.
inline int64_t grid_size(int64_t n) {
  constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;
  return std::max<int64_t>(1, std::min(at::ceil_div<int64_t>(n, kThreadsPerBlock), kMaxBlocks));
}

// Threads the current device holds at once: one wave of one-thread items.
inline int64_t resident_threads() {
  const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
  return int64_t{device->multiProcessorCount} * device->maxThreadsPerMultiProcessor;
}

namespace detail {
template <typename Kernel, typename... Args>
void launch_blocks(bool chained, Kernel kernel, int64_t blocks, Args... args) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  if (chained && at::cuda::getCurrentDeviceProperties()->major >= 9) {
    cudaLaunchAttribute overlap{};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(blocks));
    config.blockDim = dim3(kThreadsPerBlock);
    config.stream = stream;
    config.attrs = &overlap;
    config.numAttrs = 1;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
  } else {
    kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(args...);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename Kernel>
int64_t one_wave(Kernel kernel, int64_t n) {
  int blocks_per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel,
                                                               kThreadsPerBlock, 0));
  const int64_t wave =
      int64_t{at::cuda::getCurrentDeviceProperties()->multiProcessorCount} * std::max(blocks_per_sm, 1);
  return std::min(grid_size(n), wave);
}
}  // namespace detail

// Launches `kernel` over `n` items on the current stream of the current device
// and raises if the launch failed. Does nothing for n == 0.
template <typename Kernel, typename... Args>
void launch(Kernel kernel, int64_t n, Args... args) {
  if (n <= 0) return;
  detail::launch_blocks(false, kernel, grid_size(n), args...);
}

// As launch(), with at most as many blocks as the device holds at once (for
// this kernel's registers): for grid-stride or for_each_tile kernels that may
// find nothing to do (they read a flag on the device and return), so that an
// idle launch costs one wave of blocks rather than one block per 256 items.
template <typename Kernel, typename... Args>
void launch_one_wave(Kernel kernel, int64_t n, Args... args) {
  if (n <= 0) return;
  detail::launch_blocks(false, kernel, detail::one_wave(kernel, n), args...);
}

// As launch_one_wave(), for a kernel whose every thread first calls
// wait_for_previous_kernel(): from Hopper on (programmatic dependent launch)
// the launch is set up, and its blocks may take their SMs, while the kernel
// before it in the stream still runs, which hides most of the gap between
// two kernels (docs/benchmarks.md: the hub passes that find no hub). Before
// Hopper it is launch_one_wave().
template <typename Kernel, typename... Args>
void launch_one_wave_chained(Kernel kernel, int64_t n, Args... args) {
  if (n <= 0) return;
  detail::launch_blocks(true, kernel, detail::one_wave(kernel, n), args...);
}

// In a kernel launched chained: waits until the kernel before it in the
// stream has finished and its writes are visible. Every thread of the kernel
// must call it before touching global memory, also one that would return
// at once: a kernel that finished without it would let the work after it
// start before the kernel before it is done.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// In a kernel launched as one wave: lets a chained kernel after it put its
// blocks on the SMs as this kernel's blocks finish, instead of when all
// have (it still waits for this kernel's writes).
__device__ __forceinline__ void let_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Calls body(i) for every i < n, as a grid-stride loop does, for a grid of one
// wave: blocks take tiles of blockDim.x consecutive items in increasing order,
// tile blockIdx.x first and then the next one nobody has taken. *next_tile
// counts the takes and must be 0 at launch. The tiles in flight stay one
// window of the items and a block that meets light tiles takes more, where a
// grid-stride loop lets its blocks drift apart over the whole range (faster
// for a sorted segmented sum: docs/benchmarks.md). It synchronises
// the block once per tile, so every thread of the block must call it.
template <typename Counter, typename Body>
__device__ __forceinline__ void for_each_tile(int64_t n, Counter* next_tile, Body body) {
  __shared__ int64_t taken;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x; first < n;) {
    if (first + threadIdx.x < n) body(first + threadIdx.x);
    if (threadIdx.x == 0) {
      taken = (gridDim.x + static_cast<int64_t>(fetch_add(next_tile, Counter{1}))) * blockDim.x;
    }
    __syncthreads();
    first = taken;
    __syncthreads();
  }
}

// N values of T loaded or stored as one aligned access (16 bytes for N = 16 / sizeof(T)).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vector {
  T val[N];
};

template <typename T>
constexpr int kVectorWidth = 16 / sizeof(T);

inline bool is_aligned(const void* ptr, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0;
}

}  // namespace torchplug::core

// Grid-stride loop with 64-bit indices: correct for any n, on any grid size.
#define TORCHPLUG_GRID_STRIDE_LOOP(i, n)                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
