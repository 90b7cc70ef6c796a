#pragma once

// The schedule for rows of one value (inner == 1) over many outer slices
// into few slots, one 1-D index for all (torch_scatter's default dim=-1 on a
// wide tensor): deterministic mode's, and by default mul's, min's and max's.
// The index's order is built once for every slice: each chunk of kBinChunk
// positions sorted by slot, stably, and where each slot's run starts in it.
// Then one block per (outer index, span of chunks) loads each chunk's values,
// order and run starts coalesced into shared memory, and each thread combines
// the runs of the slots it owns, in order, into running partials in shared
// memory; the next chunk's loads are in flight, in registers, while a chunk
// is walked. A last pass merges the spans' partials in span order.
// Every value is read once and coalesced, where the ordered segments read
// each through the permutation, a 32-byte sector per 4-byte value
// (docs/benchmarks.md). Each slot combines its sources in source order: the
// same bits every run, and min and max hold the first position.
// Extra memory: 2 bytes a position (the order), about (N + 1) x 2 bytes a
// chunk (the run starts), N counts and outer x spans x N partials.

#include "torchplug/core/launch.cuh"
#include "torchplug/core/reduce/cuda/shared_bins.cuh"
#include "torchplug/core/reduce/policy.cuh"
#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/scratch.cuh"

#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>
#include <ATen/ops/zeros.h>
#include <cub/block/block_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace torchplug::core {

// A chunk: the positions one block of kOrderThreads x kOrderItems sorts.
constexpr int kOrderThreads = 512;
constexpr int kOrderItems = 8;
constexpr int kBinChunk = kOrderThreads * kOrderItems;
// Slots at most: a slot and a run start are 2 bytes.
constexpr int64_t kMaxOrderedBins = 4096;
// Shared memory a block takes without opting in: what admits a slot count
// (a chunk's values and order and the partials); the chunk's run starts
// (8 KB at most) come on top, past it by opt-in where they must.
constexpr int64_t kSharedBytesWithoutOptIn = int64_t{48} << 10;
// A position no source holds yet (positions are int32: E <= INT32_MAX).
constexpr int32_t kNoPosition = std::numeric_limits<int32_t>::max();

// A chunk's run starts: N + 1 of them, padded to whole 8-byte words so that
// they load as 4-byte words and the partials after them in shared memory
// stay aligned for double.
constexpr int64_t bin_starts_stride(int64_t N) { return (N + 1 + 3) / 4 * 4; }

// The index's order, the same for every slice.
struct BinOrder {
  uint16_t* order;   // [chunks][kBinChunk]: each chunk's positions by slot, in source order within a slot
  uint16_t* starts;  // [chunks][stride]: where slot s's run starts; slot N (index values outside [0, N)) ends it
  int32_t* counts;   // [N]: each slot's sources in all chunks (mean's divisor)
  int64_t E, N, chunks, stride;
};

// One block per chunk: cub's stable block radix sort of its slots (N for
// an index value outside [0, N) and for the last chunk's padding), then one
// binary search per slot for its run's start, and the run's length added to
// the slot's count: one atomic a run, where one a source serialises on a few
// slots' counters.
static __global__ void __launch_bounds__(kOrderThreads)
    bin_order_kernel(const int64_t* __restrict__ index, BinOrder b, int end_bit) {
  using Sort = cub::BlockRadixSort<uint16_t, kOrderThreads, kOrderItems, uint16_t>;
  __shared__ union {
    typename Sort::TempStorage sort;
    uint16_t slots[kBinChunk];
  } shared;
  const int64_t first = blockIdx.x * static_cast<int64_t>(kBinChunk);
  uint16_t slots[kOrderItems], positions[kOrderItems];
#pragma unroll
  for (int i = 0; i < kOrderItems; ++i) {
    const int position = threadIdx.x * kOrderItems + i;
    const int64_t row = first + position < b.E ? index[first + position] : b.N;
    const bool kept = row >= 0 && row < b.N;
    slots[i] = static_cast<uint16_t>(kept ? row : b.N);
    positions[i] = static_cast<uint16_t>(position);
  }
  Sort(shared.sort).SortBlockedToStriped(slots, positions, 0, end_bit);
  __syncthreads();  // the sort's storage is free again
#pragma unroll
  for (int i = 0; i < kOrderItems; ++i) {
    const int rank = i * kOrderThreads + threadIdx.x;
    shared.slots[rank] = slots[i];
    b.order[first + rank] = positions[i];
  }
  __syncthreads();
  const auto run_start = [&](int64_t s) {
    int low = 0, high = kBinChunk;
    while (low < high) {
      const int mid = (low + high) / 2;
      if (shared.slots[mid] < s) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    return low;
  };
  for (int64_t s = threadIdx.x; s < b.stride; s += kOrderThreads) {
    const int start = run_start(s);
    b.starts[blockIdx.x * b.stride + s] = static_cast<uint16_t>(start);
    if (s < b.N) {
      const int length = run_start(s + 1) - start;
      if (length > 0) atomicAdd(b.counts + s, length);
    }
  }
}

// sum (op)= value of the source (or span's partial) at `position`, taken in
// source order: the first position to arrive holds sum until a value wins.
template <typename Policy, typename acc_t>
__device__ __forceinline__ void combine_in_order(acc_t& sum, int32_t& held, acc_t value, int32_t position) {
  if (held == kNoPosition) held = position;
  combine_at<Policy, true>(sum, held, value, position);
}

// The shared memory of one ordered_bins_kernel block: a chunk's values,
// order and run starts, then each slot's running partial (and position, for
// an arg). Without the run starts: what takes_ordered_bins admits by.
template <typename Policy, typename scalar_t>
constexpr int64_t ordered_bins_bytes(int64_t N, bool with_starts = true) {
  using acc_t = at::opmath_type<scalar_t>;
  return kBinChunk * static_cast<int64_t>(sizeof(scalar_t) + sizeof(uint16_t)) +
         (with_starts ? bin_starts_stride(N) * static_cast<int64_t>(sizeof(uint16_t)) : 0) +
         N * static_cast<int64_t>(sizeof(acc_t) + (Policy::kHasArg ? sizeof(int32_t) : 0));
}

// One chunk of a slice held in registers, a thread's share of it: its
// values, its order and its run starts, as 4-byte words where 2-byte.
constexpr int kBinValuesPerThread = kBinChunk / kThreadsPerBlock;
constexpr int kBinOrderWordsPerThread = kBinChunk / 2 / kThreadsPerBlock;
constexpr int kBinStartWordsPerThread =
    static_cast<int>((bin_starts_stride(kMaxOrderedBins) / 2 + kThreadsPerBlock - 1) / kThreadsPerBlock);
static_assert(kBinChunk % (2 * kThreadsPerBlock) == 0, "a chunk's order splits evenly into words a thread");
static_assert(kBinStartWordsPerThread * kThreadsPerBlock * 2 >= bin_starts_stride(kMaxOrderedBins),
              "the staged start words cover the run starts of kMaxOrderedBins slots");

template <typename scalar_t>
struct StagedChunk {
  scalar_t values[kBinValuesPerThread];
  uint32_t order[kBinOrderWordsPerThread];
  uint32_t starts[kBinStartWordsPerThread];
  int length;

  // Coalesced loads with no use before store(): they stay in flight while
  // the chunk before is walked.
  __device__ __forceinline__ void load(const scalar_t* __restrict__ slice, const BinOrder& b, int64_t c) {
    const int64_t first = c * kBinChunk;
    length = static_cast<int>(std::min<int64_t>(kBinChunk, b.E - first));
#pragma unroll
    for (int i = 0; i < kBinValuesPerThread; ++i) {
      const int k = i * kThreadsPerBlock + threadIdx.x;
      if (k < length) values[i] = slice[first + k];
    }
    const auto* order_words = reinterpret_cast<const uint32_t*>(b.order + first);
#pragma unroll
    for (int i = 0; i < kBinOrderWordsPerThread; ++i) order[i] = order_words[i * kThreadsPerBlock + threadIdx.x];
    const auto* start_words = reinterpret_cast<const uint32_t*>(b.starts + c * b.stride);
#pragma unroll
    for (int i = 0; i < kBinStartWordsPerThread; ++i) {
      const int k = i * kThreadsPerBlock + threadIdx.x;
      if (k < b.stride / 2) starts[i] = start_words[k];
    }
  }

  __device__ __forceinline__ void store(scalar_t* values_s, uint32_t* order_s, uint32_t* starts_s,
                                        int64_t stride) const {
#pragma unroll
    for (int i = 0; i < kBinValuesPerThread; ++i) {
      const int k = i * kThreadsPerBlock + threadIdx.x;
      if (k < length) values_s[k] = values[i];
    }
#pragma unroll
    for (int i = 0; i < kBinOrderWordsPerThread; ++i) order_s[i * kThreadsPerBlock + threadIdx.x] = order[i];
#pragma unroll
    for (int i = 0; i < kBinStartWordsPerThread; ++i) {
      const int k = i * kThreadsPerBlock + threadIdx.x;
      if (k < stride / 2) starts_s[k] = starts[i];
    }
  }
};

// One block of kThreadsPerBlock per (outer index, span of chunks). Slot s
// belongs to thread s % kThreadsPerBlock, which alone reads and writes its
// partial: the barriers guard only the chunk in shared memory. The explicit
// minimum of one block an SM is the build that was timed: without it ptxas
// gives the staged chunk fewer registers (int32 max spilled).
template <typename Policy, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreadsPerBlock, 1)
    ordered_bins_kernel(const scalar_t* __restrict__ src, BinOrder b, int64_t spans,
                        acc_t* __restrict__ partial_values, int32_t* __restrict__ partial_args) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto* values = reinterpret_cast<scalar_t*>(shared_bytes);
  auto* order = reinterpret_cast<uint16_t*>(values + kBinChunk);
  auto* starts = order + kBinChunk;
  auto* sums = reinterpret_cast<acc_t*>(starts + b.stride);
  auto* args = reinterpret_cast<int32_t*>(sums + b.N);
  const int64_t o = blockIdx.x / spans, span = blockIdx.x % spans;
  for (int64_t s = threadIdx.x; s < b.N; s += kThreadsPerBlock) {
    sums[s] = partial_identity<Policy, acc_t>();
    if constexpr (Policy::kHasArg) args[s] = kNoPosition;
  }
  const scalar_t* slice = src + o * b.E;
  const int64_t begin = span * b.chunks / spans, end = (span + 1) * b.chunks / spans;
  StagedChunk<scalar_t> staged;
  if (begin < end) staged.load(slice, b, begin);
  for (int64_t c = begin; c < end; ++c) {
    __syncthreads();  // the last chunk's runs are walked
    staged.store(values, reinterpret_cast<uint32_t*>(order), reinterpret_cast<uint32_t*>(starts), b.stride);
    __syncthreads();
    if (c + 1 < end) staged.load(slice, b, c + 1);
    const int32_t first = static_cast<int32_t>(c * kBinChunk);
    for (int64_t s = threadIdx.x; s < b.N; s += kThreadsPerBlock) {
      acc_t sum = sums[s];
      int32_t arg = Policy::kHasArg ? args[s] : kNoPosition;
      const int run_end = starts[s + 1];
      for (int k = starts[s]; k < run_end; ++k) {
        combine_in_order<Policy>(sum, arg, static_cast<acc_t>(values[order[k]]), first + order[k]);
      }
      sums[s] = sum;
      if constexpr (Policy::kHasArg) args[s] = arg;
    }
  }
  const int64_t base = (o * spans + span) * b.N;
  for (int64_t s = threadIdx.x; s < b.N; s += kThreadsPerBlock) {
    partial_values[base + s] = sums[s];
    if constexpr (Policy::kHasArg) partial_args[base + s] = args[s];
  }
}

// One thread per (outer index, slot): the spans' partials in span order,
// after out's values (before, for min and max: in order, out's value joins
// after the sources and holds no position), then the result and its arg.
template <typename Policy, typename scalar_t, typename acc_t>
__global__ void merge_bins_kernel(const acc_t* __restrict__ partial_values, const int32_t* __restrict__ partial_args,
                                  BinOrder b, int64_t spans, int64_t outer, bool accumulate,
                                  scalar_t* __restrict__ out, int64_t* __restrict__ arg) {
  TORCHPLUG_GRID_STRIDE_LOOP(t, outer * b.N) {
    const int64_t o = t / b.N, s = t - o * b.N;
    acc_t sum = accumulate && !Policy::kHasArg ? static_cast<acc_t>(out[t]) : Policy::template identity<acc_t>();
    int32_t held = kNoPosition;
    for (int64_t span = 0; span < spans; ++span) {
      const int64_t partial = (o * spans + span) * b.N + s;
      const int32_t position = Policy::kHasArg ? partial_args[partial] : kNoPosition;
      combine_in_order<Policy>(sum, held, partial_values[partial], position);
    }
    if constexpr (Policy::kHasArg) {
      if (accumulate) {
        const auto before = static_cast<acc_t>(out[t]);
        if (Policy::wins(before, sum)) sum = before, held = kNoPosition;
      }
    }
    const int64_t count = b.counts[s];
    out[t] = static_cast<scalar_t>(finish<Policy>(sum, count, accumulate));
    if constexpr (Policy::kHasArg) arg[t] = count == 0 || held == kNoPosition ? b.E : held;
  }
}

// Whether p takes the ordered bins: one value per source along a 1-D index
// shared by two or more slices (at most 2^30: a block per slice and span),
// a slot count that fits the 2-byte order, a block's shared memory less the
// run starts under kSharedBytesWithoutOptIn, at least
// kSharedBinsEntriesPerSlot sources a slot (fewer leave most of a chunk's
// slots empty) and int32 positions.
template <typename Policy, typename scalar_t>
bool takes_ordered_bins(const ScatterProblem& p) {
  return p.index_1d && p.inner == 1 && p.outer >= 2 && p.outer <= (int64_t{1} << 30) &&
         p.N <= kMaxOrderedBins && ordered_bins_bytes<Policy, scalar_t>(p.N, false) <= kSharedBytesWithoutOptIn &&
         p.E >= kSharedBinsEntriesPerSlot * p.N && p.E <= std::numeric_limits<int32_t>::max();
}

template <typename Policy, typename scalar_t>
void ordered_bins_reduce(const ScatterProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t chunks = at::ceil_div<int64_t>(p.E, kBinChunk);
  const auto ints = p.index.options().dtype(at::kInt);
  const auto shorts = p.index.options().dtype(at::kShort);
  const int64_t stride = bin_starts_stride(p.N);
  const at::Tensor order = scratch({chunks * kBinChunk}, shorts), starts = scratch({chunks * stride}, shorts);
  const at::Tensor counts = at::zeros({p.N}, ints);
  const BinOrder b{reinterpret_cast<uint16_t*>(order.mutable_data_ptr<int16_t>()),
                   reinterpret_cast<uint16_t*>(starts.mutable_data_ptr<int16_t>()), counts.mutable_data_ptr<int32_t>(),
                   p.E, p.N, chunks, stride};
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int end_bit = 64 - __builtin_clzll(static_cast<unsigned long long>(p.N) | 1ull);
  bin_order_kernel<<<chunks, kOrderThreads, 0, stream>>>(p.index.const_data_ptr<int64_t>(), b, end_bit);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // Spans: two waves of blocks, no more spans than chunks.
  const int64_t waves_of_blocks = 2 * resident_threads() / kThreadsPerBlock;
  const int64_t spans = std::clamp<int64_t>(at::ceil_div<int64_t>(waves_of_blocks, p.outer), 1, chunks);
  const at::Tensor values = scratch({p.outer * spans * p.N}, p.src.options().dtype(at::toOpMathType(p.src.scalar_type())));
  const at::Tensor args = scratch({Policy::kHasArg ? p.outer * spans * p.N : 0}, ints);
  const int64_t shared = ordered_bins_bytes<Policy, scalar_t>(p.N);
  if (shared > kSharedBytesWithoutOptIn) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(ordered_bins_kernel<Policy, scalar_t, acc_t>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  }
  ordered_bins_kernel<Policy, scalar_t, acc_t><<<p.outer * spans, kThreadsPerBlock, shared, stream>>>(
          p.src.const_data_ptr<scalar_t>(), b, spans, values.mutable_data_ptr<acc_t>(),
          args.mutable_data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch(merge_bins_kernel<Policy, scalar_t, acc_t>, p.outer * p.N, values.const_data_ptr<acc_t>(),
         args.const_data_ptr<int32_t>(), b, spans, p.outer, p.accumulate, p.out.mutable_data_ptr<scalar_t>(),
         Policy::kHasArg ? p.arg.mutable_data_ptr<int64_t>() : nullptr);
}

}  // namespace torchplug::core
