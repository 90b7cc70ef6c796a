#pragma once

// The shared-bins strategy of the scatter family, for rows of one value
// (inner == 1) into few slots: the output slice of one outer index fits in
// shared memory (kSharedBinsBytes), as when a wide tensor is reduced along its
// last dimension into a thousand slots (torch_scatter's default dim=-1). Each
// block takes a chunk of one outer slice's entries, combines them into its
// own copy of the slice's slots with shared-memory atomics, then combines
// each slot it reached into the accumulator with one global atomic: the
// global atomics drop from one per entry to one per slot and block. Mean's
// counts over such an index are tallied the same way.

#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/reduce/policy.cuh"

#include <ATen/ceil_div.h>

#include <algorithm>

namespace torchplug::core {

constexpr int64_t kSharedBinsBytes = int64_t{32} << 10;
// Entries per block at least: a block's flush costs one atomic per slot.
constexpr int64_t kSharedBinsEntriesPerSlot = 16;

template <typename Policy, typename scalar_t, typename acc_t, bool kIndex1d>
__global__ void shared_bins_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                                   acc_t* __restrict__ acc, int64_t E, int64_t N, int64_t chunk,
                                   int64_t chunks) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  acc_t* bins = reinterpret_cast<acc_t*>(shared_bytes);
  const acc_t identity = Policy::template identity<acc_t>();
  for (int64_t b = threadIdx.x; b < N; b += blockDim.x) bins[b] = identity;
  __syncthreads();
  const int64_t o = blockIdx.x / chunks;
  const int64_t first = blockIdx.x % chunks * chunk;
  const int64_t last = first + chunk < E ? first + chunk : E;
  const scalar_t* src_o = src + o * E;
  for (int64_t e = first + threadIdx.x; e < last; e += blockDim.x) {
    const int64_t row = kIndex1d ? index[e] : index[o * E + e];
    if (row >= 0 && row < N) core::atomic_combine<Policy>(bins + row, static_cast<acc_t>(src_o[e]));
  }
  __syncthreads();
  acc_t* acc_o = acc + o * N;
  for (int64_t b = threadIdx.x; b < N; b += blockDim.x) {
    const acc_t value = bins[b];
    // A slot no entry of the chunk reached holds the identity's bits.
    if (core::detail::to_bits(value) != core::detail::to_bits(identity)) {
      core::atomic_combine<Policy>(acc_o + b, value);
    }
  }
}

template <typename acc_t>
bool takes_shared_bins(const ScatterProblem& p) {
  return p.inner == 1 && p.N * static_cast<int64_t>(sizeof(acc_t)) <= kSharedBinsBytes &&
         p.E >= kSharedBinsEntriesPerSlot * p.N && p.outer <= (int64_t{1} << 30);
}

// Combines every source of p into acc (holding the identity or out's values).
template <typename Policy, typename scalar_t, typename acc_t>
void launch_shared_bins(const ScatterProblem& p, const scalar_t* src, acc_t* acc) {
  // Chunks of at least kSharedBinsEntriesPerSlot entries per slot, and enough
  // blocks for a few waves.
  const int64_t min_chunk = kSharedBinsEntriesPerSlot * std::max<int64_t>(p.N, core::kThreadsPerBlock);
  const int64_t chunks = std::max<int64_t>(1, std::min(at::ceil_div<int64_t>(p.E, min_chunk),
                                                       at::ceil_div<int64_t>(4096, p.outer)));
  const int64_t chunk = at::ceil_div<int64_t>(p.E, chunks);
  const int64_t blocks = p.outer * chunks;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const size_t shared = static_cast<size_t>(p.N) * sizeof(acc_t);
  const auto* index = p.index.const_data_ptr<int64_t>();
  if (p.index_1d) {
    shared_bins_kernel<Policy, scalar_t, acc_t, true>
        <<<blocks, core::kThreadsPerBlock, shared, stream>>>(src, index, acc, p.E, p.N, chunk, chunks);
  } else {
    shared_bins_kernel<Policy, scalar_t, acc_t, false>
        <<<blocks, core::kThreadsPerBlock, shared, stream>>>(src, index, acc, p.E, p.N, chunk, chunks);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// counts[row] += 1 for every entry of a 1-D index, each block counting its
// chunk in shared memory first: mean's divisor into few slots, where one
// global atomic an entry serialises on each slot's counter.
static __global__ void shared_counts_kernel(const int64_t* __restrict__ index, int32_t* __restrict__ counts,
                                            int64_t E, int64_t N, int64_t chunk) {
  extern __shared__ int32_t tally[];
  for (int64_t b = threadIdx.x; b < N; b += blockDim.x) tally[b] = 0;
  __syncthreads();
  const int64_t first = blockIdx.x * chunk;
  const int64_t last = first + chunk < E ? first + chunk : E;
  for (int64_t e = first + threadIdx.x; e < last; e += blockDim.x) {
    const int64_t row = index[e];
    if (row >= 0 && row < N) atomicAdd(tally + row, 1);
  }
  __syncthreads();
  for (int64_t b = threadIdx.x; b < N; b += blockDim.x) {
    if (tally[b] != 0) atomicAdd(counts + b, tally[b]);
  }
}

// Whether a 1-D index of E entries into N slots takes shared_counts.
inline bool takes_shared_counts(int64_t E, int64_t N) {
  return N * static_cast<int64_t>(sizeof(int32_t)) <= kSharedBinsBytes && E >= kSharedBinsEntriesPerSlot * N;
}

// counts (zeroed, N) += how many entries of index (1-D, E) land on each slot:
// chunks of kSharedBinsEntriesPerSlot entries a thread, and no more blocks
// than a wave, each adding at most one atomic a slot.
inline void launch_shared_counts(const int64_t* index, int32_t* counts, int64_t E, int64_t N) {
  const int64_t chunk = std::max(kSharedBinsEntriesPerSlot * core::kThreadsPerBlock,
                                 at::ceil_div<int64_t>(E, core::resident_threads() / core::kThreadsPerBlock));
  shared_counts_kernel<<<at::ceil_div<int64_t>(E, chunk), core::kThreadsPerBlock,
                         static_cast<size_t>(N) * sizeof(int32_t), at::cuda::getCurrentCUDAStream()>>>(
      index, counts, E, N, chunk);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace torchplug::core
