#pragma once

// The index plan: what the reduction ops learn from an index before they
// reduce, built on the device with no host synchronisation, or taken from a
// caller's own CSR. Strategies read its Csr view:
//
//   auto plan = core::plan_index<int32_t>(index, E, N, {.permutation = core::Permutation::kAtomic});
//   my_segment_kernel<<<...>>>(..., plan.csr());   // row r's sources: csr.bounds(r, ...)
//
//   auto plan = core::plan_from_indptr<int32_t>(indptr, E);   // segment_csr's indptr, sorted
//
// From an index (a row per source, E sources, N rows) it holds:
//   - per-row counts and their prefix sum, rowptr (one pass over the index,
//     which also finds out whether the index is sorted: nobody has to say so);
//   - an unsorted flag on the device (set too when a value lies outside [0, N),
//     which are left out of the counts);
//   - for an unsorted index, a permutation listing each row's sources: by a
//     counting sort with atomics (kAtomic: each row's sources in arbitrary
//     order), or by a stable sort (kStable: in source order, for deterministic
//     results; it reads the flag back, one synchronisation, and skips the
//     sort for a sorted index).

#include "torchplug/core/cache_hint.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/scratch.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/cub.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>

#include <cstdint>
#include <limits>
#include <tuple>

namespace torchplug::core {

constexpr unsigned kFullMask = 0xffffffffu;

// counts[row + 1] = how many entries of index name row, one atomic per run of
// equal rows in a warp; *unsorted = 1 if some index[e] > index[e + 1] or some
// value lies outside [0, N). Each thread keeps kIndexPassUnroll loads in
// flight (one load per thread leaves the pass latency bound), and each block
// writes the flag at most once (a write per warp makes one address hot). With
// counts_if_unsorted false the counts only matter for a sorted index: a block
// that finds the flag already set (init_stats_kernel's probe) returns, and a
// warp that sees a descent skips its atomics.
constexpr int kIndexPassUnroll = 4;

// Zeroes stats (`size` counts and flags) and writes its unsorted flag,
// stats[flag_at]: with `probe`, 1 when one of kProbePairs evenly spaced pairs
// of neighbouring index entries descends. One block's look finds a random
// index out, where the counting pass would read all of it (docs/benchmarks.md); a
// sorted index has no descent anywhere and is left to the counting pass.
// Block 0 alone writes the flag, and holds all its loads in flight: a sorted
// call waits for it.
constexpr int kProbePairs = 2048;
static_assert(kProbePairs % kThreadsPerBlock == 0);

template <typename offset_t>
__global__ void init_stats_kernel(offset_t* __restrict__ stats, int64_t size, int64_t flag_at,
                                  const int64_t* __restrict__ index, int64_t E, bool probe) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, size) {
    if (i != flag_at) stats[i] = 0;
  }
  if (blockIdx.x != 0) return;
  constexpr int kPairsPerThread = kProbePairs / kThreadsPerBlock;
  bool descent = false;
  if (probe) {
    int64_t left[kPairsPerThread], right[kPairsPerThread];
#pragma unroll
    for (int i = 0; i < kPairsPerThread; ++i) {
      const int64_t e = (E - 1) * (i * kThreadsPerBlock + threadIdx.x) / kProbePairs;
      left[i] = index[e];
      right[i] = e + 1 < E ? index[e + 1] : left[i];
    }
#pragma unroll
    for (int i = 0; i < kPairsPerThread; ++i) descent |= left[i] > right[i];
  }
  const bool flagged = __syncthreads_or(descent);
  if (threadIdx.x == 0) stats[flag_at] = flagged ? 1 : 0;
}

template <typename offset_t>
__global__ void count_rows_kernel(const int64_t* __restrict__ index, int64_t E, int64_t N,
                                  offset_t* __restrict__ counts, offset_t* __restrict__ unsorted,
                                  bool counts_if_unsorted) {
  // The whole block returns or none of it: other blocks may set the flag meanwhile.
  if (!counts_if_unsorted && __syncthreads_or(*unsorted != 0)) return;
  const int lane = threadIdx.x % 32;
  const int64_t span = static_cast<int64_t>(blockDim.x) * kIndexPassUnroll;
  bool descent = false;
  for (int64_t base = blockIdx.x * span; base < E; base += gridDim.x * span) {
    int64_t rows[kIndexPassUnroll], after_warp[kIndexPassUnroll];
#pragma unroll
    for (int u = 0; u < kIndexPassUnroll; ++u) {
      const int64_t e = base + u * blockDim.x + threadIdx.x;
      rows[u] = e < E ? index[e] : -1;
      after_warp[u] = lane == 31 && e + 1 < E ? index[e + 1] : 0;
    }
    bool tile_descent = false;
#pragma unroll
    for (int u = 0; u < kIndexPassUnroll; ++u) {
      const int64_t e = base + u * blockDim.x + threadIdx.x;
      int64_t next = __shfl_down_sync(kFullMask, rows[u], 1);
      if (lane == 31) next = after_warp[u];
      // Out-of-range values are left out of the counts, so positions no longer
      // match sources: such an index is treated as an unsorted one.
      const bool counted = rows[u] >= 0 && rows[u] < N;
      tile_descent |= (e < E && !counted) || (e + 1 < E && rows[u] > next);
    }
    descent |= tile_descent;
    if (!counts_if_unsorted && __any_sync(kFullMask, tile_descent)) continue;
#pragma unroll
    for (int u = 0; u < kIndexPassUnroll; ++u) {
      const int64_t row = rows[u];
      const int64_t prev = __shfl_up_sync(kFullMask, row, 1);
      const bool head = lane == 0 || prev != row;
      const unsigned heads = __ballot_sync(kFullMask, head);
      const unsigned later_heads = lane == 31 ? 0u : heads >> (lane + 1);
      const int run = later_heads ? __ffs(later_heads) : 32 - lane;
      if (head && row >= 0 && row < N) atomic_add(counts + row + 1, static_cast<offset_t>(run));
    }
  }
  if (__syncthreads_or(descent) && threadIdx.x == 0) *unsorted = 1;
}

// perm[rowptr[row] ...] = the entries naming row, in arbitrary order, when
// *unsorted; rowptr[0, N) serve as the cursors, which leaves rowptr[row] at the
// end of row's range. kIndexPassUnroll entries per thread, so that as many
// returning atomics are in flight. The index is read evict-first (only the
// long-row kernels read it again) and perm's scattered stores are marked
// evict-last: they merge into whole sectors in L2 and the segment kernel finds
// perm there (measured in docs/benchmarks.md; less so for a perm larger than L2).
template <typename offset_t>
__global__ void fill_perm_kernel(const int64_t* __restrict__ index, int64_t E, int64_t N,
                                 const offset_t* __restrict__ unsorted, offset_t* __restrict__ rowptr,
                                 offset_t* __restrict__ perm) {
  if (*unsorted == 0) return;
  const int64_t span = static_cast<int64_t>(blockDim.x) * kIndexPassUnroll;
  for (int64_t base = blockIdx.x * span; base < E; base += gridDim.x * span) {
    int64_t rows[kIndexPassUnroll];
    offset_t slots[kIndexPassUnroll];
#pragma unroll
    for (int u = 0; u < kIndexPassUnroll; ++u) {
      const int64_t e = base + u * blockDim.x + threadIdx.x;
      rows[u] = e < E ? __ldcs(index + e) : -1;
    }
#pragma unroll
    for (int u = 0; u < kIndexPassUnroll; ++u) {
      if (rows[u] >= 0 && rows[u] < N) slots[u] = fetch_add(rowptr + rows[u], offset_t{1});
    }
#pragma unroll
    for (int u = 0; u < kIndexPassUnroll; ++u) {
      const int64_t e = base + u * blockDim.x + threadIdx.x;
      if (rows[u] >= 0 && rows[u] < N) store_evict_last(perm + slots[u], static_cast<offset_t>(e));
    }
  }
}

// The CSR as the kernels after the permutation fill read it.
template <typename offset_t>
struct Csr {
  const offset_t* rowptr;    // N + 1 prefix sums; see bounds()
  const offset_t* perm;      // E entries, the first rowptr[N] filled when *unsorted;
                             // nullptr when an unsorted index takes the atomic rows
  const offset_t* unsorted;  // written by the counting pass

  // Row r's sources are positions [start, end) of the sorted order: rowptr[r]
  // .. rowptr[r + 1] for a sorted index; the permutation fill moves each
  // rowptr[r] to the end of row r, so rowptr[r - 1] (0 for r = 0) .. rowptr[r]
  // after it (a stable permutation points rowptr one past the prefix sums, to
  // the same effect). All three loads go out at once, whatever `permuted`
  // turns out to be.
  __device__ __forceinline__ void bounds(int64_t row, bool permuted, offset_t& start,
                                         offset_t& end) const {
    const offset_t before = row == 0 ? 0 : rowptr[row - 1];
    const offset_t at = rowptr[row];
    const offset_t after = rowptr[row + 1];
    start = permuted ? before : at;
    end = permuted ? at : after;
  }
};

// How an unsorted index gets its permutation.
enum class Permutation : int8_t {
  kNone,    // none: the caller handles an unsorted index otherwise (Csr::perm is null)
  kAtomic,  // a counting sort with atomics: fast, each row's order arbitrary
  kStable,  // a stable sort by row: each row's sources in increasing position
};

struct PlanOptions {
  Permutation permutation = Permutation::kAtomic;
  // Probe the index for a descent first (init_stats_kernel), and leave the
  // counts of an unsorted index unfinished: for callers that count only a
  // sorted index and go elsewhere otherwise.
  bool probe = false;
  // Spare counters zeroed with the flags, for the strategies' own use (tiles taken, ...).
  int64_t counters = 0;
};

// The plan and the tensors it owns. stats holds [counts (N + 1) | unsorted
// flag | spare counters].
template <typename offset_t>
struct IndexPlan {
  at::Tensor stats, rowptr, perm;
  int64_t N = 0;
  bool stable = false;

  offset_t* unsorted() const { return stats.mutable_data_ptr<offset_t>() + N + 1; }
  offset_t* counter(int64_t k) const { return unsorted() + 1 + k; }
  Csr<offset_t> csr() const {
    return {rowptr.const_data_ptr<offset_t>() + (stable ? 1 : 0),
            perm.defined() ? perm.const_data_ptr<offset_t>() : nullptr, unsorted()};
  }
};

// Analyses index[0, E) (int64 on the current device) against N rows.
template <typename offset_t>
IndexPlan<offset_t> plan_index(const at::Tensor& index, int64_t E, int64_t N, PlanOptions options);

// A caller's own CSR (segment_csr's indptr: int64 [N + 1] on the current
// device, monotone, starting at 0): row r's sources are positions indptr[r] ..
// indptr[r + 1] of E. The offsets are indptr clamped into [0, E], so that a
// malformed one (outside checked mode) never reads past the sources: a row
// whose end lies before its start is empty.
template <typename offset_t>
IndexPlan<offset_t> plan_from_indptr(const at::Tensor& indptr, int64_t E, int64_t counters = 0);

// Row keys for the stable sort: the row, or N for values outside [0, N), which
// sort last, past every counted position; each key's position too, where
// `positions` is given (the values a radix sort carries along).
template <typename key_t, typename offset_t>
__global__ void sort_keys_kernel(const int64_t* __restrict__ index, int64_t E, int64_t N,
                                 key_t* __restrict__ keys, offset_t* __restrict__ positions) {
  TORCHPLUG_GRID_STRIDE_LOOP(e, E) {
    const int64_t row = index[e];
    keys[e] = static_cast<key_t>(row >= 0 && row < N ? row : N);
    if (positions != nullptr) positions[e] = static_cast<offset_t>(e);
  }
}

template <typename offset_t>
IndexPlan<offset_t> plan_index(const at::Tensor& index, int64_t E, int64_t N, PlanOptions options) {
  IndexPlan<offset_t> plan;
  plan.N = N;
  plan.stable = options.permutation == Permutation::kStable;
  const auto* rows = index.const_data_ptr<int64_t>();
  const auto offsets = index.options().dtype(c10::CppTypeToScalarType<offset_t>::value);
  const int64_t size = N + 2 + options.counters;
  plan.stats = scratch({size}, offsets);
  offset_t* stats = plan.stats.template mutable_data_ptr<offset_t>();
  launch(init_stats_kernel<offset_t>, size, stats, size, N + 1, rows, E, options.probe);
  const int64_t threads = at::ceil_div<int64_t>(E, kIndexPassUnroll);
  if (options.probe) {
    // One wave: a flagged index leaves the counting pass a wave of blocks that return.
    launch_one_wave(count_rows_kernel<offset_t>, threads, rows, E, N, stats, plan.unsorted(), false);
  } else {
    launch(count_rows_kernel<offset_t>, threads, rows, E, N, stats, plan.unsorted(), true);
  }
  // A stable permutation's rowptr is read one past the prefix sums (Csr::bounds).
  plan.rowptr = at::cumsum(plan.stats.narrow(0, 0, N + (plan.stable ? 2 : 1)), 0, plan.stats.scalar_type());
  if (options.permutation == Permutation::kAtomic) {
    // Allocated for a sorted index too: knowing it is sorted would take a synchronisation.
    plan.perm = scratch({E}, offsets);
    launch_one_wave(fill_perm_kernel<offset_t>, threads, rows, E, N, plan.unsorted(),
                    plan.rowptr.template mutable_data_ptr<offset_t>(),
                    plan.perm.template mutable_data_ptr<offset_t>());
  } else if (plan.stable) {
    // A caller that wants a fixed order may wait for the flag: a sorted index
    // (all values inside [0, N)) needs no sort.
    if (plan.stats.narrow(0, N + 1, 1).template item<offset_t>() == 0) {
      plan.stable = false;
      return plan;
    }
    if (N < std::numeric_limits<int32_t>::max() && E <= std::numeric_limits<int>::max()) {
      // cub's stable radix sort over only the bits a row needs (20 for a
      // million rows; ATen's sort takes all 32), the positions carried as
      // offset_t values: no int64 order to convert.
      const at::Tensor keys = scratch({E}, index.options().dtype(at::kInt));
      const at::Tensor positions = scratch({E}, offsets);
      launch(sort_keys_kernel<int32_t, offset_t>, E, rows, E, N, keys.mutable_data_ptr<int32_t>(),
             positions.template mutable_data_ptr<offset_t>());
      const at::Tensor sorted_keys = scratch({E}, keys.options());
      plan.perm = scratch({E}, offsets);
      const int end_bit = 64 - __builtin_clzll(static_cast<unsigned long long>(N) | 1ull);
      at::cuda::cub::radix_sort_pairs(keys.const_data_ptr<int32_t>(), sorted_keys.mutable_data_ptr<int32_t>(),
                                      positions.template const_data_ptr<offset_t>(),
                                      plan.perm.template mutable_data_ptr<offset_t>(), E, /*descending=*/false,
                                      /*begin_bit=*/0, end_bit);
    } else {
      const at::Tensor keys = scratch({E}, index.options().dtype(at::kLong));
      launch(sort_keys_kernel<int64_t, offset_t>, E, rows, E, N, keys.mutable_data_ptr<int64_t>(),
             static_cast<offset_t*>(nullptr));
      plan.perm = std::get<1>(keys.sort(std::optional<bool>(true), /*dim=*/0)).to(offsets.dtype());
    }
    plan.stats.narrow(0, N + 1, 1).fill_(1);  // every index is read through the permutation
  }
  return plan;
}

// rowptr[i] = indptr[i] clamped to [0, E] for i < n, and the plan's `size`
// stats zeroed in the same pass: no counts, the flag 0 (sorted), the
// counters at 0.
template <typename offset_t>
__global__ void clamp_indptr_kernel(const int64_t* __restrict__ indptr, offset_t* __restrict__ rowptr, int64_t n,
                                    int64_t E, offset_t* __restrict__ stats, int64_t size) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, size) {
    if (i < n) rowptr[i] = static_cast<offset_t>(min(max(indptr[i], int64_t{0}), E));
    stats[i] = 0;
  }
}

template <typename offset_t>
IndexPlan<offset_t> plan_from_indptr(const at::Tensor& indptr, int64_t E, int64_t counters) {
  IndexPlan<offset_t> plan;
  plan.N = indptr.numel() - 1;
  const auto offsets = indptr.options().dtype(c10::CppTypeToScalarType<offset_t>::value);
  plan.rowptr = scratch({plan.N + 1}, offsets);
  const int64_t size = plan.N + 2 + counters;
  plan.stats = scratch({size}, offsets);
  launch(clamp_indptr_kernel<offset_t>, size, indptr.const_data_ptr<int64_t>(),
         plan.rowptr.template mutable_data_ptr<offset_t>(), plan.N + 1, E,
         plan.stats.template mutable_data_ptr<offset_t>(), size);
  return plan;
}

}  // namespace torchplug::core
