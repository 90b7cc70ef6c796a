#pragma once

// The warp-runs strategy of the scatter family, for rows of one value (inner
// == 1) and for an index of src's shape: kWarpRunsUnroll chunks of 32
// consecutive elements per warp; runs of equal slots are found with a ballot,
// combined with a segmented shuffle scan and combined into the accumulator
// with one atomic each (core/reduction.cuh).

#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/reduce/index_plan.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/reduce/policy.cuh"

#include <ATen/ceil_div.h>

namespace torchplug::core {


// Combines `value` into acc[slot] once per run of equal slots across the warp.
template <typename Policy, typename acc_t>
__device__ __forceinline__ void warp_run_combine(acc_t* acc, int64_t slot, acc_t value, bool valid,
                                             int lane) {
  const int64_t prev_slot = __shfl_up_sync(kFullMask, slot, 1);
  const bool head = lane == 0 || prev_slot != slot;
  const unsigned heads = __ballot_sync(kFullMask, head);
  const int run_start = 31 - __clz(heads & (kFullMask >> (31 - lane)));
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const acc_t other = __shfl_up_sync(kFullMask, value, offset);
    if (lane - offset >= run_start) Policy::combine(value, other);
  }
  const bool tail = lane == 31 || ((heads >> (lane + 1)) & 1u);
  if (valid && tail && slot >= 0) core::atomic_combine<Policy>(acc + slot, value);
}

constexpr int kWarpRunsUnroll = 4;

// kFlat: outer == inner == 1, so element i lands in slot index[i]. Otherwise
// i = (o * E + e) * inner + f lands in slot (o * N + row) * inner + f, with
// row = index[e] (kIndex1d) or index[i].

template <typename Policy, typename scalar_t, typename acc_t, bool kIndex1d, bool kFlat>
__global__ void warp_runs_kernel(const scalar_t* __restrict__ src,
                                         const int64_t* __restrict__ index, acc_t* __restrict__ acc,
                                         int64_t E, int64_t inner, int64_t N, int64_t numel) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) / 32;
  const int64_t first_warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  for (int64_t w = first_warp * kWarpRunsUnroll; w * 32 < numel; w += warps * kWarpRunsUnroll) {
    int64_t slot[kWarpRunsUnroll];
    acc_t value[kWarpRunsUnroll];
#pragma unroll
    for (int u = 0; u < kWarpRunsUnroll; ++u) {
      const int64_t i = (w + u) * 32 + lane;
      slot[u] = -1;
      value[u] = Policy::template identity<acc_t>();
      if (i < numel) {
        int64_t row, base = 0, f = 0;
        if constexpr (kFlat) {
          row = index[i];
        } else {
          f = i % inner;
          const int64_t oe = i / inner;
          row = kIndex1d ? index[oe % E] : index[i];
          base = oe / E * N;
        }
        if (row >= 0 && row < N) slot[u] = (base + row) * inner + f;
        value[u] = static_cast<acc_t>(src[i]);
      }
    }
#pragma unroll
    for (int u = 0; u < kWarpRunsUnroll; ++u) {
      warp_run_combine<Policy>(acc, slot[u], value[u], (w + u) * 32 + lane < numel, lane);
    }
  }
}

// Combines every source of p into acc (the output, or a float accumulator of
// it), which holds the policy's identity or out's values.
template <typename Policy, typename scalar_t, typename acc_t>
void launch_warp_runs(const ScatterProblem& p, const scalar_t* src, acc_t* acc) {
  const int64_t numel = p.src.numel();
  const int64_t threads = at::ceil_div<int64_t>(numel, kWarpRunsUnroll);
  const auto* index = p.index.const_data_ptr<int64_t>();
  const auto launch = [&](auto kernel) {
    core::launch(kernel, threads, src, index, acc, p.E, p.inner, p.N, numel);
  };
  if (p.outer == 1 && p.inner == 1) {
    launch(warp_runs_kernel<Policy, scalar_t, acc_t, true, true>);
  } else if (p.index_1d) {
    launch(warp_runs_kernel<Policy, scalar_t, acc_t, true, false>);
  } else {
    launch(warp_runs_kernel<Policy, scalar_t, acc_t, false, false>);
  }
}

}  // namespace torchplug::core
