// torchplug::scatter_sum CUDA kernels. Index values outside [0, N) are
// skipped by every kernel: a bad index never writes out of bounds.
//
// Which kernel runs:
//   1-D index, inner > 1, small (takes_atomic_rows: by default at most 2^21
//       source elements, or 128 or 256 MiB of source, by row width and
//       type) -> atomic rows: a wave of threads steps through (outer,
//       kAtomicRowsUnroll consecutive entries, column vector) items and adds
//       each run of equal rows with one (vector) atomic, a warp's runs of one
//       hot row summed in registers first. One launch, where the CSR below
//       takes ten.
//   1-D index, inner > 1, larger -> CSR, with no host synchronisation (with dim_size
//       given and checked mode off, the whole call): each choice below is made
//       on the device, by kernels that read a flag an earlier one wrote and
//       return when the work is not theirs (the long-row pair is launched only
//       when E > kMaxSegment, which the host knows).
//         - one pass over the index counts each output row's sources and
//           notes whether the index is sorted (nobody has to say so); a prefix
//           sum gives each row its range of positions in the sorted order.
//         - unsorted indices, and those with values outside [0, N), get a
//           permutation listing each row's sources (a counting sort); for
//           sorted ones the fill returns at once. Rows of at most
//           kAtomicRowBytes (float32 up to 16 values) skip it: an unsorted
//           index is summed by the atomic rows above, after a zero fill; a
//           probe of a few pairs of neighbours finds most unsorted indices
//           before the counting pass, which then returns at once, and the
//           pass leaves out the atomics of warps that see a descent.
//         - segments: one thread per (outer, row, column vector) sums its row's
//           sources and writes the row once: no atomics, no zero fill, no read-
//           modify-write of rows the L2 cannot hold.
//         - long rows, more than kMaxSegment sources, which would serialise on
//           one thread: threads take equal slices of the sorted order and add
//           each run of such a row into a scratch slot in src's math type with
//           one (vector) atomic; a last pass writes those rows.
//       Extra memory: the E-long permutation (not for narrow rows), O(N)
//       offsets and the long-row scratch, min(N, ceil(E / kMaxSegment)) rows of
//       inner values in the math type per outer index (none when E <=
//       kMaxSegment); never O(E x F).
//   inner == 1, or an index of src's shape -> warp runs: kWarpRunsUnroll
//       chunks of 32 consecutive elements per warp; runs of equal slots are
//       found with a ballot, summed with a segmented shuffle scan and added
//       with one atomic each.

#include "scatter_kernel.h"

#include "torchplug/core/atomic.cuh"
#include "torchplug/core/cache_hint.cuh"
#include "torchplug/core/checks.h"
#include "torchplug/core/launch.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <type_traits>

namespace torchplug::scatter_detail {
namespace {

using core::Vector;

constexpr int kRowsPerThread = 16;
// A row with more sources than this goes to the long-row kernels.
constexpr int64_t kMaxSegment = 1024;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T, int V>
__device__ __forceinline__ void load_as(const T* ptr, at::opmath_type<T> (&values)[V]) {
  const auto loaded = *reinterpret_cast<const Vector<T, V>*>(ptr);
#pragma unroll
  for (int k = 0; k < V; ++k) values[k] = static_cast<at::opmath_type<T>>(loaded.val[k]);
}

// ---- warp runs ---------------------------------------------------------------

// Adds `value` into acc[slot] once per run of equal slots across the warp.
template <typename acc_t>
__device__ __forceinline__ void warp_run_add(acc_t* acc, int64_t slot, acc_t value, bool valid,
                                             int lane) {
  const int64_t prev_slot = __shfl_up_sync(kFullMask, slot, 1);
  const bool head = lane == 0 || prev_slot != slot;
  const unsigned heads = __ballot_sync(kFullMask, head);
  const int run_start = 31 - __clz(heads & (kFullMask >> (31 - lane)));
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const acc_t other = __shfl_up_sync(kFullMask, value, offset);
    if (lane - offset >= run_start) value += other;
  }
  const bool tail = lane == 31 || ((heads >> (lane + 1)) & 1u);
  if (valid && tail && slot >= 0) core::atomic_add(acc + slot, value);
}

constexpr int kWarpRunsUnroll = 4;

// kFlat: outer == inner == 1, so element i lands in slot index[i]. Otherwise
// i = (o * E + e) * inner + f lands in slot (o * N + row) * inner + f, with
// row = index[e] (kIndex1d) or index[i].

template <typename scalar_t, typename acc_t, bool kIndex1d, bool kFlat>
__global__ void scatter_warp_runs_kernel(const scalar_t* __restrict__ src,
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
      value[u] = 0;
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
      warp_run_add(acc, slot[u], value[u], (w + u) * 32 + lane < numel, lane);
    }
  }
}

// ---- atomic rows -------------------------------------------------------------

constexpr int kAtomicRowsUnroll = 4;
// Whether a kernel queued ahead of a choice made on the device has work:
// always, or when a flag an earlier kernel wrote is set.
struct Always {
  __device__ bool operator()() const { return true; }
};

template <typename offset_t>
struct IfSet {
  const offset_t* flag;
  __device__ bool operator()() const { return *flag != 0; }
};

// The key most lanes of the warp hold (ties: the lowest such lane), or -1 when
// no lane holds one (key < 0). Every lane calls it.
__device__ __forceinline__ int64_t most_common_key(int64_t key, int lane) {
  const unsigned same = __match_any_sync(kFullMask, key);
  unsigned best = (key >= 0 ? __popc(same) : 0) << 5 | (31 - lane);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    best = max(best, __shfl_xor_sync(kFullMask, best, offset));
  }
  const int64_t chosen = __shfl_sync(kFullMask, key, 31 - static_cast<int>(best & 31));
  return best >> 5 == 0 ? -1 : chosen;
}

// A warp's runs of one hot destination, key = o * N + row, summed in registers
// and added with one atomic per column when the warp lets the key go: a row
// that takes most entries (a hub) would otherwise get one atomic per run, all
// serialised in one L2 slice. When the last kHotRowPatience calls brought no
// run of the key (and at the first call) the warp takes the key most of its
// lanes hold in this call, so that it settles on a hub at once; a random index
// pays a vote per call of add() and, every kHotRowPatience + 1 calls, a new key
// and the flush of the one run it took. A lane must hold one column at every
// call (hot_row_applies); other rows do without (every run gets its own atomic).
constexpr int kHotRowPatience = 8;

// Whether rows of `vectors` column vectors keep each lane of a wave on one
// column: the grid-stride step, whole blocks, is then a multiple of `vectors`,
// and a warp's lanes either repeat the row's columns (vectors divides 32) or
// each hold a different one of the same row (32 divides vectors).
static_assert(core::kThreadsPerBlock % 32 == 0 &&
              (core::kThreadsPerBlock & (core::kThreadsPerBlock - 1)) == 0,
              "blocks of whole warps, a power of two");
__host__ __device__ constexpr bool hot_row_applies(int64_t vectors) {
  return core::kThreadsPerBlock % vectors == 0;
}

template <int V, typename acc_t>
class HotRow {
 public:
  // `column`: this lane's, the same at every call when hot_row_applies.
  __device__ HotRow(acc_t* acc, int64_t inner, int64_t vectors, int64_t column, int lane)
      : acc_(acc),
        inner_(inner),
        vectors_(vectors),
        column_(column),
        lane_(lane),
        enabled_(hot_row_applies(vectors)) {
    clear();
  }

  // Adds the run that ends at this lane (key >= 0; -1: none) at acc + key *
  // inner + column, or into the hot sum. Every lane of the warp calls it.
  __device__ void add(int64_t key, int64_t column, const acc_t (&run)[V]) {
    if (!enabled_) {
      if (key >= 0) core::atomic_add_vector(acc_ + key * inner_ + column, run);
      return;
    }
    if (misses_ >= kHotRowPatience) {
      flush();
      key_ = most_common_key(key, lane_);
      misses_ = key_ >= 0 ? 0 : kHotRowPatience;
    }
    const bool hit = key >= 0 && key == key_;
    if (hit) {
#pragma unroll
      for (int k = 0; k < V; ++k) sum_[k] += run[k];
    } else if (key >= 0) {
      core::atomic_add_vector(acc_ + key * inner_ + column, run);
    }
    if (__any_sync(kFullMask, hit)) {
      pending_ = true;
      misses_ = 0;
    } else {
      ++misses_;
    }
  }

  // Adds the hot sum: the lanes of each column add theirs together, and the
  // warp's first min(vectors, 32) lanes issue the atomics. Every lane calls it.
  __device__ void flush() {
    if (!pending_) return;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      for (int offset = vectors_; offset < 32; offset <<= 1) {
        sum_[k] += __shfl_xor_sync(kFullMask, sum_[k], offset);
      }
    }
    if (lane_ < vectors_) core::atomic_add_vector(acc_ + key_ * inner_ + column_, sum_);
    clear();
  }

 private:
  // -0.0 adds nothing to any value, -0.0 included.
  __device__ void clear() {
#pragma unroll
    for (int k = 0; k < V; ++k) sum_[k] = std::is_floating_point_v<acc_t> ? acc_t(-0.0) : acc_t(0);
    pending_ = false;
  }

  acc_t* acc_;
  int64_t inner_, vectors_, column_;
  int lane_;
  bool enabled_;
  int64_t key_ = -1;
  int misses_ = kHotRowPatience;  // adopt a key at the first step
  bool pending_ = false;          // the same in every lane of the warp
  acc_t sum_[V];
};

// Entries [first, first + kAtomicRowsUnroll) of outer slice o, columns
// [column, column + V): each run of equal rows among them is one atomic, or
// part of a warp's hot sum (HotRow). Whole warps step through the items
// together, for HotRow's warp-wide votes and exchanges.
template <typename scalar_t, typename acc_t, int V, typename Gate>
__global__ void atomic_rows_kernel(const scalar_t* __restrict__ src,
                                   const int64_t* __restrict__ index, acc_t* __restrict__ acc,
                                   int64_t E, int64_t inner, int64_t N, int64_t groups,
                                   int64_t items, Gate has_work) {
  if (!has_work()) return;
  const int64_t vectors = inner / V;
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  HotRow<V, acc_t> hot(acc, inner, vectors, thread % vectors * V, lane);
  for (int64_t warp_first = thread - lane; warp_first < items; warp_first += stride) {
    const int64_t t = warp_first + lane;
    const int64_t column = t % vectors * V;
    const int64_t group = t / vectors;
    const int64_t o = group / groups;
    const int64_t first = group % groups * kAtomicRowsUnroll;
    int64_t rows[kAtomicRowsUnroll];
    acc_t values[kAtomicRowsUnroll][V] = {};
#pragma unroll
    for (int u = 0; u < kAtomicRowsUnroll; ++u) {
      rows[u] = -1;
      if (t < items && first + u < E) {
        rows[u] = index[first + u];
        load_as<scalar_t, V>(src + (o * E + first + u) * inner + column, values[u]);
      }
    }
    // A run's sum starts at its first value, not at +0: -0.0 + -0.0 stays -0.0.
    acc_t sum[V];
#pragma unroll
    for (int k = 0; k < V; ++k) sum[k] = values[0][k];
#pragma unroll
    for (int u = 0; u < kAtomicRowsUnroll; ++u) {
      const bool last = u + 1 == kAtomicRowsUnroll;
      const bool run_ends = last || rows[u + 1] != rows[u];
      hot.add(run_ends && rows[u] >= 0 && rows[u] < N ? o * N + rows[u] : -1, column, sum);
      if (!last) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          sum[k] = run_ends ? values[u + 1][k] : sum[k] + values[u + 1][k];
        }
      }
    }
  }
  hot.flush();
}

// ---- CSR ---------------------------------------------------------------------

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
// index out, where the counting pass would read all of it (on the H200, 83 us
// of the 0.54 ms that 40M rows of two floats take; docs/benchmarks.md); a
// sorted index has no descent anywhere and is left to the counting pass.
// Block 0 alone writes the flag, and holds all its loads in flight: a sorted
// call waits for it.
constexpr int kProbePairs = 2048;
static_assert(kProbePairs % core::kThreadsPerBlock == 0);

template <typename offset_t>
__global__ void init_stats_kernel(offset_t* __restrict__ stats, int64_t size, int64_t flag_at,
                                  const int64_t* __restrict__ index, int64_t E, bool probe) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, size) {
    if (i != flag_at) stats[i] = 0;
  }
  if (blockIdx.x != 0) return;
  constexpr int kPairsPerThread = kProbePairs / core::kThreadsPerBlock;
  bool descent = false;
  if (probe) {
    int64_t left[kPairsPerThread], right[kPairsPerThread];
#pragma unroll
    for (int i = 0; i < kPairsPerThread; ++i) {
      const int64_t e = (E - 1) * (i * core::kThreadsPerBlock + threadIdx.x) / kProbePairs;
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
      if (head && row >= 0 && row < N) core::atomic_add(counts + row + 1, static_cast<offset_t>(run));
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
// perm there (on the H200, 4% off a random F=64 float32 call and 8% off
// bfloat16; 2% off at E=20M and 40M, whose perm is larger than L2).
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
      if (rows[u] >= 0 && rows[u] < N) slots[u] = core::fetch_add(rowptr + rows[u], offset_t{1});
    }
#pragma unroll
    for (int u = 0; u < kIndexPassUnroll; ++u) {
      const int64_t e = base + u * blockDim.x + threadIdx.x;
      if (rows[u] >= 0 && rows[u] < N) core::store_evict_last(perm + slots[u], static_cast<offset_t>(e));
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
  offset_t* long_rows;       // set when some row has more than kMaxSegment sources

  // Row r's sources are positions [start, end) of the sorted order: rowptr[r]
  // .. rowptr[r + 1] for a sorted index; the permutation fill moves each
  // rowptr[r] to the end of row r, so rowptr[r - 1] (0 for r = 0) .. rowptr[r]
  // after it. All three loads go out at once, whatever `permuted` turns out to be.
  __device__ __forceinline__ void bounds(int64_t row, bool permuted, offset_t& start,
                                         offset_t& end) const {
    const offset_t before = row == 0 ? 0 : rowptr[row - 1];
    const offset_t at = rowptr[row];
    const offset_t after = rowptr[row + 1];
    start = permuted ? before : at;
    end = permuted ? at : after;
  }
};

// One accumulator per (outer, long row) in src's math type, `slots` per outer
// index: row itself when per_row, else start / kMaxSegment (two long rows start
// more than kMaxSegment positions apart, so they never share one).
template <typename acc_t>
struct LongRowScratch {
  acc_t* data;
  int64_t slots;
  bool per_row;

  __device__ acc_t* row(int64_t o, int64_t row, int64_t start, int64_t inner) const {
    return data + (o * slots + (per_row ? row : start / kMaxSegment)) * inner;
  }
};

// Item t of a grid over (outer, row, column vector).
struct RowItem {
  int64_t slot;  // o * N + row
  int64_t o, row, v;
};

__device__ __forceinline__ RowItem row_item(int64_t t, int64_t vectors, int64_t outer, int64_t N) {
  RowItem item;
  item.slot = t / vectors;
  item.v = t - item.slot * vectors;
  item.o = outer == 1 ? 0 : item.slot / N;
  item.row = item.slot - item.o * N;
  return item;
}

// Adds sources k .. k + U - 1 of a row into sum, with all U loads in flight.
template <int U, bool kPermuted, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void add_sources(at::opmath_type<scalar_t> (&sum)[V],
                                            const scalar_t* column, const offset_t* perm,
                                            offset_t k, int64_t inner) {
  at::opmath_type<scalar_t> value[U][V];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t e = kPermuted ? static_cast<int64_t>(perm[k + u]) : static_cast<int64_t>(k + u);
    load_as<scalar_t, V>(column + e * inner, value[u]);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int j = 0; j < V; ++j) sum[j] += value[u][j];
  }
}

// Adds sources k .. end - 1 of a row into sum: batches of 8, then, for a
// sorted index, one batch each of 4, 2 and 1, so that a row's last sources
// wait out at most three memory latencies. With a permutation that tail
// measured slower, so there it stays one source at a time.
template <bool kPermuted, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void add_row(at::opmath_type<scalar_t> (&sum)[V], const scalar_t* column,
                                        const offset_t* perm, offset_t k, offset_t end,
                                        int64_t inner) {
  for (; static_cast<int64_t>(k) + 8 <= end; k += 8) add_sources<8, kPermuted>(sum, column, perm, k, inner);
  if constexpr (kPermuted) {
    for (; k < end; ++k) add_sources<1, kPermuted>(sum, column, perm, k, inner);
  } else {
    if (end - k >= 4) {
      add_sources<4, kPermuted>(sum, column, perm, k, inner);
      k += 4;
    }
    if (end - k >= 2) {
      add_sources<2, kPermuted>(sum, column, perm, k, inner);
      k += 2;
    }
    if (k < end) add_sources<1, kPermuted>(sum, column, perm, k, inner);
  }
}

// What a segment kernel needs besides src and out (kernel parameters of their
// own: __restrict__ on a struct member does not reach the loads).
template <typename scalar_t, typename offset_t>
struct Segments {
  Csr<offset_t> csr;
  LongRowScratch<at::opmath_type<scalar_t>> scratch;
  int64_t E, inner, outer, N;
  int64_t items;  // outer * N * (inner / V)
  bool accumulate;
  offset_t* next_tile;  // 0 at launch; see core::for_each_tile
};

// One thread per (outer, row, column vector) item: sums the row's sources
// and writes the row once. A row with more than kMaxSegment sources is left
// to the long-row kernels: its scratch slot is zeroed and *long_rows set.
// The kernel for each kind of index that may occur is launched (the
// permuted one unless an unsorted index takes the atomic rows); one that
// does not match *unsorted returns. The items go out in tiles taken in
// order (core::for_each_tile), *next_tile counting the tiles taken. Kept
// lean on purpose: three 64-bit divisions per item and a perm check per
// source cost this gather a fifth of its bandwidth on the H200, and one
// kernel for both kinds (the registers of the sorted one) a sixth of it
// with a permutation.
template <typename scalar_t, int V, typename offset_t, bool kPermuted>
__device__ __forceinline__ void segment_sum(const scalar_t* __restrict__ src,
                                            scalar_t* __restrict__ out,
                                            const Segments<scalar_t, offset_t>& s) {
  using acc_t = at::opmath_type<scalar_t>;
  if ((*s.csr.unsorted != 0) != kPermuted) return;
  const int64_t vectors = s.inner / V;
  core::for_each_tile(s.items, s.next_tile, [&](int64_t t) {
    const RowItem item = row_item(t, vectors, s.outer, s.N);
    offset_t start, end;
    s.csr.bounds(item.row, kPermuted, start, end);
    if (end - start > kMaxSegment) {
      *reinterpret_cast<Vector<acc_t, V>*>(s.scratch.row(item.o, item.row, start, s.inner) +
                                           item.v * V) = {};
      *s.csr.long_rows = 1;
      return;
    }
    const scalar_t* column = src + item.o * s.E * s.inner + item.v * V;
    scalar_t* target = out + item.slot * s.inner + item.v * V;
    acc_t sum[V] = {};
    if (s.accumulate) load_as<scalar_t, V>(target, sum);
    add_row<kPermuted, scalar_t, V>(sum, column, s.csr.perm, start, end, s.inner);
    Vector<scalar_t, V> result;
#pragma unroll
    for (int j = 0; j < V; ++j) result.val[j] = static_cast<scalar_t>(sum[j]);
    *reinterpret_cast<Vector<scalar_t, V>*>(target) = result;
  });
}

template <typename scalar_t, int V, typename offset_t, bool kPermuted>
__global__ void segment_sum_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ out,
                                   Segments<scalar_t, offset_t> s) {
  segment_sum<scalar_t, V, offset_t, kPermuted>(src, out, s);
}

// The permuted gather waits on scattered loads and wants every warp an SM
// holds: capped at 32 registers (8 blocks of 256 threads per SM) it ran 3%
// faster on the H200 at F=64, float32 and bfloat16, than with the 34 and 44 it
// takes uncapped, and 2% slower at F=256 float32 (docs/benchmarks.md). 8- and
// 16-bit integer types would spill hundreds of bytes under the cap; the cap is
// kept to floating types (float32 and half spill 8 bytes, bfloat16 and double
// nothing) with 32-bit offsets. A kernel of its own, not a template argument of
// segment_sum_kernel: any __launch_bounds__, even (256, 1), changes how ptxas
// allocates the uncapped kernels' registers (40 -> 54 for the sorted float one).
template <typename scalar_t, typename offset_t>
constexpr bool kCapPermutedRegisters =
    std::is_floating_point_v<at::opmath_type<scalar_t>> && sizeof(offset_t) == 4;

template <typename scalar_t, int V, typename offset_t>
__global__ void __launch_bounds__(core::kThreadsPerBlock, 8)
    capped_permuted_segment_sum_kernel(const scalar_t* __restrict__ src,
                                       scalar_t* __restrict__ out, Segments<scalar_t, offset_t> s) {
  segment_sum<scalar_t, V, offset_t, true>(src, out, s);
}

// Adds the sources of long rows into their scratch slots. Thread (o, chunk, v)
// takes kRowsPerThread consecutive positions of the sorted order and issues one
// (vector) atomic per run of a long row among them; other rows are skipped.
template <typename scalar_t, int V, typename offset_t>
__global__ void long_rows_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                                 Csr<offset_t> csr, LongRowScratch<at::opmath_type<scalar_t>> scratch,
                                 int64_t E, int64_t inner, int64_t N, int64_t chunks, int64_t items) {
  using acc_t = at::opmath_type<scalar_t>;
  if (*csr.long_rows == 0) return;
  const bool permuted = *csr.unsorted != 0;
  const int64_t positions = csr.rowptr[N];
  const int64_t vectors = inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t v = t % vectors;
    const int64_t chunk = t / vectors % chunks;
    const int64_t o = t / vectors / chunks;
    const int64_t k_end = min((chunk + 1) * kRowsPerThread, positions);
    const scalar_t* column = src + o * E * inner + v * V;

    int64_t row = -1;
    acc_t* target = nullptr;  // the current row's slot, when the row is long
    acc_t sum[V];
    for (int64_t k = chunk * kRowsPerThread; k < k_end; ++k) {
      const int64_t e = permuted ? static_cast<int64_t>(csr.perm[k]) : k;
      const int64_t next = index[e];
      if (next != row) {
        if (target) core::atomic_add_vector(target, sum);
        row = next;
        offset_t start, end;
        csr.bounds(row, permuted, start, end);
        target = end - start > kMaxSegment ? scratch.row(o, row, start, inner) + v * V : nullptr;
#pragma unroll
        for (int j = 0; j < V; ++j) sum[j] = 0;
      }
      if (target) {
        acc_t value[V];
        load_as<scalar_t, V>(column + e * inner, value);
#pragma unroll
        for (int j = 0; j < V; ++j) sum[j] += value[j];
      }
    }
    if (target) core::atomic_add_vector(target, sum);
  }
}

// Zeroes the first `vectors` vectors of V values of out when has_work().
template <typename scalar_t, int V, typename Gate>
__global__ void zero_kernel(scalar_t* __restrict__ out, int64_t vectors, Gate has_work) {
  if (!has_work()) return;
  TORCHPLUG_GRID_STRIDE_LOOP(t, vectors) {
    reinterpret_cast<Vector<scalar_t, V>*>(out)[t] = Vector<scalar_t, V>{};
  }
}

// Writes each long row: (accumulate ? out : 0) + its scratch slot.
template <typename scalar_t, int V, typename offset_t>
__global__ void store_long_rows_kernel(Csr<offset_t> csr,
                                       LongRowScratch<at::opmath_type<scalar_t>> scratch,
                                       scalar_t* __restrict__ out, int64_t inner, int64_t outer,
                                       int64_t N, int64_t items, bool accumulate) {
  using acc_t = at::opmath_type<scalar_t>;
  if (*csr.long_rows == 0) return;
  const bool permuted = *csr.unsorted != 0;
  const int64_t vectors = inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const RowItem item = row_item(t, vectors, outer, N);
    offset_t start, end;
    csr.bounds(item.row, permuted, start, end);
    if (end - start <= kMaxSegment) continue;
    scalar_t* target = out + item.slot * inner + item.v * V;
    acc_t sum[V] = {};
    if (accumulate) load_as<scalar_t, V>(target, sum);
    acc_t partial[V];
    load_as<acc_t, V>(scratch.row(item.o, item.row, start, inner) + item.v * V, partial);
    Vector<scalar_t, V> result;
#pragma unroll
    for (int j = 0; j < V; ++j) result.val[j] = static_cast<scalar_t>(sum[j] + partial[j]);
    *reinterpret_cast<Vector<scalar_t, V>*>(target) = result;
  }
}

// ---- dispatch ----------------------------------------------------------------

// The widest vector of V values (16 bytes at most) that divides inner and fits
// the alignment of every pointer the kernel steps through.
template <typename scalar_t>
int vector_width(int64_t inner, std::initializer_list<const void*> pointers) {
  for (int width = core::kVectorWidth<scalar_t>; width > 1; width /= 2) {
    bool fits = inner % width == 0;
    for (const void* ptr : pointers) fits = fits && core::is_aligned(ptr, width * sizeof(scalar_t));
    if (fits) return width;
  }
  return 1;
}

template <int... Widths, typename Body>
void for_width(int width, Body body) {
  ((width == Widths ? (body(std::integral_constant<int, Widths>{}), true) : false) || ...);
}

// Launches kernel<V> for V = width, a power of two up to kMaxWidth; only those
// widths are compiled.
template <typename scalar_t, int kMaxWidth = core::kVectorWidth<scalar_t>, typename Launch>
void with_width(int width, Launch launch) {
  for_width<16, 8, 4, 2, 1>(width, [&](auto w) {
    constexpr int V = decltype(w)::value;
    if constexpr (V <= kMaxWidth) launch(w);
  });
}

// Launches kernel<V> with the widest V (16 bytes at most) that divides inner
// and keeps every pointer aligned.
template <typename scalar_t, typename Launch>
void with_vector_width(int64_t inner, std::initializer_list<const void*> pointers, Launch launch) {
  with_width<scalar_t>(vector_width<scalar_t>(inner, pointers), launch);
}

// The atomic rows' column vector: vector_width where the accumulator is float,
// whose 16-byte vectors are one atomic each (sm_90; float16 and bfloat16 add
// 8 values as two); one value for the other types. Their V values would be V
// scalar atomics, each a warp instruction over every V-th column, where lanes
// on consecutive columns make one L2 request per sector (float64 rows of 8
// with a random index on the H200: 0.69x `scatter_add_` at V = 2, 1.03x at
// V = 1; docs/benchmarks.md).
template <typename scalar_t>
constexpr int kAtomicRowsMaxWidth =
    std::is_same_v<at::opmath_type<scalar_t>, float> ? core::kVectorWidth<scalar_t> : 1;

template <typename scalar_t>
int atomic_rows_width(int64_t inner, std::initializer_list<const void*> pointers) {
  return kAtomicRowsMaxWidth<scalar_t> > 1 ? vector_width<scalar_t>(inner, pointers) : 1;
}

// Queues the atomic rows of p into acc (the output, or a float accumulator of
// it), in one wave: a warp that steps through many items keeps a hub as its
// hot row.
template <typename scalar_t, typename acc_t, typename Gate>
void launch_atomic_rows(const ScatterProblem& p, const scalar_t* src, acc_t* acc, Gate has_work) {
  const int64_t groups = at::ceil_div<int64_t>(p.E, kAtomicRowsUnroll);
  const int width = atomic_rows_width<scalar_t>(p.inner, {src, acc});
  with_width<scalar_t, kAtomicRowsMaxWidth<scalar_t>>(width, [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t items = p.outer * groups * (p.inner / V);
    core::launch_one_wave(atomic_rows_kernel<scalar_t, acc_t, V, Gate>, items, src,
                          p.index.const_data_ptr<int64_t>(), acc, p.E, p.inner, p.N, groups,
                          items, has_work);
  });
}

// Rows of at most kAtomicRowBytes in a type whose atomic add is one instruction
// and which is its own accumulator: the atomic rows add them straight into the
// output with one (vector) atomic per run and column vector. float16 and
// bfloat16 (a float accumulator of the output's size) are not narrow.
constexpr int64_t kAtomicRowBytes = 64;

template <typename scalar_t>
constexpr bool kOwnAtomicType = std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double> ||
                                std::is_same_v<scalar_t, int32_t> || std::is_same_v<scalar_t, int64_t>;

template <typename scalar_t>
bool has_narrow_rows(const ScatterProblem& p) {
  return kOwnAtomicType<scalar_t> && p.inner * static_cast<int64_t>(sizeof(scalar_t)) <= kAtomicRowBytes;
}

// Up to how large a source the atomic rows beat the CSR, on one H200
// (docs/benchmarks.md). The CSR's fixed cost is tens of microseconds, and it
// sums a narrow unsorted index with the same atomic rows. Where HotRow applies
// (hot_row_applies) and the type is its own accumulator, they won with a random
// or hub index up to 128 MiB of source (2^25 float32 values) in every type and
// width measured (float32 rows of 2 to 1024 values, float64 rows of 2 to 256,
// int32 rows of 16, int64 rows of 8 and 16), but for float32 rows of 512 and
// 1024 with a random index at 128 MiB (0.94-0.99x; rows of 1024 1.42x in a
// second run); and with a sorted one too, but for narrow rows in the types
// added one value per lane (int32 rows of 16 0.85x at 64 MiB), whose segments
// the CSR reads at copy speed. Narrow float32 rows, added as vectors, won with
// every index up to 256 MiB. The limits are in bytes: float64 rows of 64 and
// 256 values lost at 256 MiB with a random or sorted index (0.62-0.75x).
// Elsewhere the limit measured before HotRow stays, 2^21 elements and 2^17
// entries: where HotRow is off a hub row gets one atomic per run, serialised,
// and float16 and bfloat16 accumulate in a float copy of the output, bounded
// too. TORCHPLUG_SCATTER_ATOMIC_LIMIT, in source elements, replaces every limit
// (0: always the CSR), which is how the tests reach the CSR with small inputs.
constexpr int64_t kNarrowAtomicRowsBytes = int64_t{1} << 28;
constexpr int64_t kHotAtomicRowsBytes = int64_t{1} << 27;
constexpr int64_t kAtomicRowsLimit = int64_t{1} << 21;

std::optional<int64_t> atomic_rows_limit_override() {
  static const std::optional<int64_t> limit = []() -> std::optional<int64_t> {
    const char* text = std::getenv("TORCHPLUG_SCATTER_ATOMIC_LIMIT");
    if (text == nullptr) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text, &end, 10);
    TORCH_CHECK(end != text && *end == '\0' && errno != ERANGE && value >= 0, kOp,
                ": TORCHPLUG_SCATTER_ATOMIC_LIMIT must be a non-negative integer, got '", text, "'");
    return static_cast<int64_t>(value);
  }();
  return limit;
}

template <typename scalar_t>
bool takes_atomic_rows(const ScatterProblem& p) {
  if (!p.index_1d || p.inner == 1) return false;
  const int64_t elements = p.src.numel();
  if (const auto limit = atomic_rows_limit_override()) {
    return elements <= *limit && (kOwnAtomicType<scalar_t> || p.out.numel() <= *limit);
  }
  if constexpr (kOwnAtomicType<scalar_t>) {
    const int width = atomic_rows_width<scalar_t>(p.inner, {p.src.const_data_ptr(), p.out.const_data_ptr()});
    if (hot_row_applies(p.inner / width)) {
      const int64_t bytes = elements * static_cast<int64_t>(sizeof(scalar_t));
      const bool narrow_vectors = width > 1 && has_narrow_rows<scalar_t>(p);  // float32 only
      return bytes <= (narrow_vectors ? kNarrowAtomicRowsBytes : kHotAtomicRowsBytes);
    }
  }
  return elements <= kAtomicRowsLimit && p.E <= kAtomicRowsLimit / 16 &&
         (kOwnAtomicType<scalar_t> || p.out.numel() <= kAtomicRowsLimit);
}

// 1-D index, inner > 1: CSR of the index, then segments and long rows, all
// queued at once (long rows only when E > kMaxSegment). Offsets are 32-bit
// while E allows: half the bytes and faster atomics. For narrow rows
// (has_narrow_rows) an unsorted index takes the atomic rows instead of the
// permutation (in float32 on the H200 up to 7x faster with a random index, and
// up to 16x with a row taking half of the entries; docs/benchmarks.md): the
// zero fill and the atomic rows are queued too and return unless the probe or
// the counting pass flagged the index unsorted.
template <typename scalar_t, typename offset_t>
void csr_sum(const ScatterProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const bool atomics_if_unsorted = has_narrow_rows<scalar_t>(p);
  const auto* index = p.index.const_data_ptr<int64_t>();
  const at::TensorOptions offset_options = p.index.options().dtype(c10::CppTypeToScalarType<offset_t>::value);
  // [counts (N + 1) | unsorted flag | long-rows flag | tiles taken by the
  // sorted and by the permuted segment kernel], zeroed; the unsorted flag set
  // already when narrow rows' probe finds a descent.
  at::Tensor stats = at::empty({p.N + 5}, offset_options);
  auto* stats_ptr = stats.mutable_data_ptr<offset_t>();
  offset_t* const flags = stats_ptr + p.N + 1;
  core::launch(init_stats_kernel<offset_t>, p.N + 5, stats_ptr, p.N + 5, p.N + 1, index, p.E,
               atomics_if_unsorted);
  const int64_t count_threads = at::ceil_div<int64_t>(p.E, kIndexPassUnroll);
  if (atomics_if_unsorted) {
    // One wave: a flagged index leaves the counting pass a wave of blocks that return.
    core::launch_one_wave(count_rows_kernel<offset_t>, count_threads, index, p.E, p.N, stats_ptr,
                          flags, false);
  } else {
    core::launch(count_rows_kernel<offset_t>, count_threads, index, p.E, p.N, stats_ptr, flags,
                 true);
  }
  at::Tensor rowptr = at::cumsum(stats.narrow(0, 0, p.N + 1), 0, stats.scalar_type());
  // The permutation, unless an unsorted index takes the atomic rows; allocated
  // for a sorted index too: knowing it is sorted would take a synchronisation.
  at::Tensor perm;
  if (!atomics_if_unsorted) {
    perm = at::empty({p.E}, offset_options);
    core::launch_one_wave(fill_perm_kernel<offset_t>, count_threads, index, p.E, p.N,
                          flags, rowptr.mutable_data_ptr<offset_t>(),
                          perm.mutable_data_ptr<offset_t>());
  }
  const Csr<offset_t> csr{rowptr.const_data_ptr<offset_t>(),
                          perm.defined() ? perm.const_data_ptr<offset_t>() : nullptr, flags,
                          flags + 1};

  // One slot per output row, or per kMaxSegment positions when that is fewer:
  // never more elements than the output. With E <= kMaxSegment no row is long:
  // no slots and no long-row launches.
  const bool may_have_long_rows = p.E > kMaxSegment;
  const int64_t slots =
      may_have_long_rows ? std::min(p.N, at::ceil_div<int64_t>(p.E, kMaxSegment)) : 0;
  at::Tensor scratch_tensor = at::empty({p.outer * slots * p.inner},
                                        p.src.options().dtype(at::toOpMathType(p.src.scalar_type())));
  const LongRowScratch<acc_t> scratch{scratch_tensor.mutable_data_ptr<acc_t>(), slots, slots == p.N};

  const auto* src = p.src.const_data_ptr<scalar_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  with_vector_width<scalar_t>(p.inner, {src, out}, [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t vectors = p.inner / V;
    const int64_t rows = p.outer * p.N * vectors;
    const Segments<scalar_t, offset_t> sorted{
        csr, scratch, p.E, p.inner, p.outer, p.N, rows, p.accumulate, flags + 2};
    core::launch_one_wave(segment_sum_kernel<scalar_t, V, offset_t, false>, rows, src, out, sorted);
    if (atomics_if_unsorted) {
      if constexpr (kOwnAtomicType<scalar_t>) {  // acc_t is scalar_t: straight into out
        const IfSet<offset_t> unsorted{flags};
        if (!p.accumulate) {
          core::launch_one_wave(zero_kernel<scalar_t, V, IfSet<offset_t>>, rows, out, rows, unsorted);
        }
        launch_atomic_rows<scalar_t>(p, src, out, unsorted);
      }
    } else {
      Segments<scalar_t, offset_t> permuted = sorted;
      permuted.next_tile = flags + 3;
      const auto permuted_kernel = [] {
        if constexpr (kCapPermutedRegisters<scalar_t, offset_t>) {
          return capped_permuted_segment_sum_kernel<scalar_t, V, offset_t>;
        } else {
          return segment_sum_kernel<scalar_t, V, offset_t, true>;
        }
      }();
      core::launch_one_wave(permuted_kernel, rows, src, out, permuted);
    }
    if (!may_have_long_rows) return;
    const int64_t chunks = at::ceil_div<int64_t>(p.E, kRowsPerThread);
    const int64_t slices = p.outer * chunks * vectors;
    core::launch_one_wave(long_rows_kernel<scalar_t, V, offset_t>, slices, src, index, csr,
                          scratch, p.E, p.inner, p.N, chunks, slices);
    core::launch_one_wave(store_long_rows_kernel<scalar_t, V, offset_t>, rows, csr, scratch, out,
                          p.inner, p.outer, p.N, rows, p.accumulate);
  });
}

// ---- accumulator -------------------------------------------------------------

// Zeroes t on the current stream with one memset: a small call's zero_() costs
// a TensorIterator's host work more (docs/benchmarks.md, "Small calls: the
// accumulator").
void zero_async(const at::Tensor& t) {
  C10_CUDA_CHECK(
      cudaMemsetAsync(t.mutable_data_ptr(), 0, t.nbytes(), at::cuda::getCurrentCUDAStream()));
}

// to[0, V) = from[0, V), converted.
template <typename To, typename From, int V>
__device__ __forceinline__ void convert_vector(To* to, const From* from) {
  const auto loaded = *reinterpret_cast<const Vector<From, V>*>(from);
  Vector<To, V> converted;
#pragma unroll
  for (int j = 0; j < V; ++j) converted.val[j] = static_cast<To>(loaded.val[j]);
  *reinterpret_cast<Vector<To, V>*>(to) = converted;
}

// to[0, n) = from[0, n), converted: V values at a time, the last n % V one by one.
template <typename To, typename From, int V>
__global__ void convert_kernel(To* __restrict__ to, const From* __restrict__ from, int64_t n) {
  const int64_t vectors = n / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, vectors) convert_vector<To, From, V>(to + t * V, from + t * V);
  const int64_t rest = vectors * V + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (rest < n) convert_vector<To, From, 1>(to + rest, from + rest);
}

// Between a float16 or bfloat16 output and its float accumulator, in vectors as
// wide as the output's alignment allows (the accumulator, a fresh allocation,
// is aligned for any).
template <typename To, typename From>
void convert(To* to, const From* from, int64_t n) {
  using Narrow = std::conditional_t<(sizeof(To) < sizeof(From)), To, From>;
  const int width = vector_width<Narrow>(core::kVectorWidth<Narrow>, {to, from});
  with_width<Narrow>(width, [&](auto w) {
    constexpr int V = decltype(w)::value;
    core::launch(convert_kernel<To, From, V>, at::ceil_div<int64_t>(n, V), to, from, n);
  });
}

// Runs body(src, index, acc) on an accumulator of p.out in src's math type:
// p.out itself, zeroed unless accumulating, or for float16 and bfloat16 a
// float buffer, zeroed or loaded from p.out and converted back into it.
// A memset and one kernel each way, where zeros_like, to() and copy_() would
// take a TensorIterator's host work each.
template <typename scalar_t, typename Body>
void with_accumulator(const ScatterProblem& p, Body body) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto* src = p.src.const_data_ptr<scalar_t>();
  const auto* index = p.index.const_data_ptr<int64_t>();
  if constexpr (std::is_same_v<acc_t, scalar_t>) {
    if (!p.accumulate) zero_async(p.out);
    body(src, index, p.out.mutable_data_ptr<acc_t>());
  } else {
    const at::Tensor acc =
        at::empty(p.out.sizes(), p.out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    auto* out = p.out.mutable_data_ptr<scalar_t>();
    auto* acc_ptr = acc.mutable_data_ptr<acc_t>();
    if (p.accumulate) {
      convert(acc_ptr, out, p.out.numel());
    } else {
      zero_async(acc);
    }
    body(src, index, acc_ptr);
    convert(out, acc_ptr, p.out.numel());
  }
}

template <typename scalar_t>
void atomic_rows(const ScatterProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  with_accumulator<scalar_t>(p, [&](const scalar_t* src, const int64_t*, acc_t* acc) {
    // Alignment is checked in src's element size: enough for acc when it is
    // the output itself; a float accumulator of float16 or bfloat16 is a fresh
    // allocation, aligned for any vector atomic.
    TORCH_INTERNAL_ASSERT((std::is_same_v<acc_t, scalar_t> || core::is_aligned(acc, 16)));
    launch_atomic_rows<scalar_t>(p, src, acc, Always{});
  });
}

template <typename scalar_t>
void warp_runs(const ScatterProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t numel = p.src.numel();
  const int64_t threads = at::ceil_div<int64_t>(numel, kWarpRunsUnroll);
  with_accumulator<scalar_t>(p, [&](const scalar_t* src, const int64_t* index, acc_t* acc) {
    const auto launch = [&](auto kernel) {
      core::launch(kernel, threads, src, index, acc, p.E, p.inner, p.N, numel);
    };
    if (p.outer == 1 && p.inner == 1) {
      launch(scatter_warp_runs_kernel<scalar_t, acc_t, true, true>);
    } else if (p.index_1d) {
      launch(scatter_warp_runs_kernel<scalar_t, acc_t, true, false>);
    } else {
      launch(scatter_warp_runs_kernel<scalar_t, acc_t, false, false>);
    }
  });
}

}  // namespace

void scatter_sum_kernel_cuda(const ScatterProblem& p) {
  if (p.out.numel() == 0) return;
  if (p.src.numel() == 0) {
    if (!p.accumulate) zero_async(p.out);
    return;
  }
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::scatter_sum", [&] {
    if (takes_atomic_rows<scalar_t>(p)) {
      atomic_rows<scalar_t>(p);
    } else if (p.index_1d && p.inner > 1 && p.E <= std::numeric_limits<int32_t>::max()) {
      csr_sum<scalar_t, int32_t>(p);
    } else if (p.index_1d && p.inner > 1) {
      csr_sum<scalar_t, int64_t>(p);
    } else {
      warp_runs<scalar_t>(p);
    }
  });
}

namespace {

// Both entries check devices before anything else, so that a CPU tensor among
// CUDA ones is reported with both devices named; plan() checks them again for
// the Meta and CPU paths. The guard is taken before plan(), which may read the
// index on the device (checked mode, default dim_size).
at::Tensor scatter_sum_cuda(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  core::check_same_device(kOp, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  std::optional<int64_t> size;
  if (dim_size) size = dim_size->expect_int();
  TORCHPLUG_CHECK_CUDA(kOp, src);
  const c10::cuda::CUDAGuard guard(src.device());
  const auto problem = plan(src, index, dim, size);
  scatter_sum_kernel_cuda(problem);
  return problem.out;
}

void scatter_sum_inplace_cuda(const at::Tensor& out, const at::Tensor& src,
                              const at::Tensor& index, int64_t dim) {
  core::check_same_device(kOp, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  TORCHPLUG_CHECK_CUDA(kOp, src);
  const c10::cuda::CUDAGuard guard(src.device());
  const auto problem = plan_inplace(out, src, index, dim);
  scatter_sum_kernel_cuda(problem);
  finish_inplace(problem, out);
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, CUDA, m) {
  m.impl("scatter_sum", &torchplug::scatter_detail::scatter_sum_cuda);
  m.impl("scatter_sum_", &torchplug::scatter_detail::scatter_sum_inplace_cuda);
}
