#pragma once

// The atomic-rows strategy of the scatter family, for a 1-D index and rows of
// several values: a wave of threads steps through (outer, kAtomicRowsUnroll
// consecutive entries, column vector) items and combines each run of equal
// rows into the accumulator with one (vector) atomic, a warp's runs of one hot
// row combined in registers first. One launch, where the CSR takes several.
// Also the atomic form the CSR hands narrow rows of an unsorted index to.

#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/reduce/index_plan.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/reduce/policy.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <type_traits>

namespace torchplug::core {


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

template <typename Policy, int V, typename acc_t>
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
      if (key >= 0) core::atomic_combine_vector<Policy>(acc_ + key * inner_ + column, run);
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
      for (int k = 0; k < V; ++k) Policy::combine(sum_[k], run[k]);
    } else if (key >= 0) {
      core::atomic_combine_vector<Policy>(acc_ + key * inner_ + column, run);
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
        Policy::combine(sum_[k], __shfl_xor_sync(kFullMask, sum_[k], offset));
      }
    }
    if (lane_ < vectors_) core::atomic_combine_vector<Policy>(acc_ + key_ * inner_ + column_, sum_);
    clear();
  }

 private:
  // A floating sum's partial sums start at -0.0, which adds nothing to any
  // value, -0.0 included (the identity, +0.0, would turn a -0.0 into +0.0).
  __device__ void clear() {
    constexpr bool kSignedZero = Policy::kAtomic == core::AtomicKind::kAdd && std::is_floating_point_v<acc_t>;
#pragma unroll
    for (int k = 0; k < V; ++k) sum_[k] = kSignedZero ? acc_t(-0.0) : Policy::template identity<acc_t>();
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
template <typename Policy, typename scalar_t, typename acc_t, int V, typename Gate>
__global__ void atomic_rows_kernel(const scalar_t* __restrict__ src,
                                   const int64_t* __restrict__ index, acc_t* __restrict__ acc,
                                   int64_t E, int64_t inner, int64_t N, int64_t groups,
                                   int64_t items, Gate has_work) {
  if (!has_work()) return;
  const int64_t vectors = inner / V;
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  HotRow<Policy, V, acc_t> hot(acc, inner, vectors, thread % vectors * V, lane);
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
        core::load_as<scalar_t, V>(src + (o * E + first + u) * inner + column, values[u]);
      }
    }
    // A run starts at its first value.
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
          if (run_ends) {
            sum[k] = values[u + 1][k];
          } else {
            Policy::combine(sum[k], values[u + 1][k]);
          }
        }
      }
    }
  }
  hot.flush();
}

// The atomic rows' column vector: vector_width where the accumulator is float,
// whose 16-byte vectors are one atomic each (sm_90; float16 and bfloat16 add
// 8 values as two); one value for the other types. Their V values would be V
// scalar atomics, each a warp instruction over every V-th column, where lanes
// on consecutive columns make one L2 request per sector (docs/benchmarks.md).
// Reductions without a vector atomic (kCas) take one value per lane too.
template <typename Policy, typename scalar_t>
constexpr int kAtomicRowsMaxWidth = std::is_same_v<at::opmath_type<scalar_t>, float> &&
                                            Policy::kAtomic == core::AtomicKind::kAdd
                                        ? core::kVectorWidth<scalar_t>
                                        : 1;

template <typename Policy, typename scalar_t>
int atomic_rows_width(int64_t inner, std::initializer_list<const void*> pointers) {
  return kAtomicRowsMaxWidth<Policy, scalar_t> > 1 ? core::vector_width<scalar_t>(inner, pointers) : 1;
}

// Queues the atomic rows of p into acc (the output, or a float accumulator of
// it), in one wave: a warp that steps through many items keeps a hub as its
// hot row.
template <typename Policy, typename scalar_t, typename acc_t, typename Gate>
void launch_atomic_rows(const ScatterProblem& p, const scalar_t* src, acc_t* acc, Gate has_work) {
  const int64_t groups = at::ceil_div<int64_t>(p.E, kAtomicRowsUnroll);
  const int width = atomic_rows_width<Policy, scalar_t>(p.inner, {src, acc});
  core::with_width<scalar_t, kAtomicRowsMaxWidth<Policy, scalar_t>>(width, [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t items = p.outer * groups * (p.inner / V);
    core::launch_one_wave(atomic_rows_kernel<Policy, scalar_t, acc_t, V, Gate>, items, src,
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

// Up to how large a source the atomic rows beat the CSR (the CSR's fixed cost
// is tens of microseconds; measured per type, width and index in
// docs/benchmarks.md). Limits are in bytes of source:
//   kNarrowAtomicRowsBytes  narrow float32 rows, added as vector atomics
//   kHotAtomicRowsBytes     rows HotRow combines (hot_row_applies) in a type that is its own accumulator
//   kAtomicRowsLimit        elements, elsewhere: a hub row gets one atomic per run, serialised, and
//                           float16 and bfloat16 accumulate in a float copy of the output
// TORCHPLUG_SCATTER_ATOMIC_LIMIT, in source elements, replaces every limit
// (0: always the CSR), which is how the tests reach the CSR with small inputs.
constexpr int64_t kNarrowAtomicRowsBytes = int64_t{1} << 28;
constexpr int64_t kHotAtomicRowsBytes = int64_t{1} << 27;
constexpr int64_t kAtomicRowsLimit = int64_t{1} << 21;

inline std::optional<int64_t> atomic_rows_limit_override() {
  static const std::optional<int64_t> limit = []() -> std::optional<int64_t> {
    const char* text = std::getenv("TORCHPLUG_SCATTER_ATOMIC_LIMIT");
    if (text == nullptr) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text, &end, 10);
    TORCH_CHECK(end != text && *end == '\0' && errno != ERANGE && value >= 0,
                "torchplug::scatter: TORCHPLUG_SCATTER_ATOMIC_LIMIT must be a non-negative integer, got '",
                text, "'");
    return static_cast<int64_t>(value);
  }();
  return limit;
}

template <typename Policy, typename scalar_t>
bool takes_atomic_rows(const ScatterProblem& p) {
  if (!p.index_1d || p.inner == 1) return false;
  const int64_t elements = p.src.numel();
  if (const auto limit = atomic_rows_limit_override()) {
    return elements <= *limit && (kOwnAtomicType<scalar_t> || p.out.numel() <= *limit);
  }
  if constexpr (kOwnAtomicType<scalar_t>) {
    const int width =
        atomic_rows_width<Policy, scalar_t>(p.inner, {p.src.const_data_ptr(), p.out.const_data_ptr()});
    if (hot_row_applies(p.inner / width)) {
      const int64_t bytes = elements * static_cast<int64_t>(sizeof(scalar_t));
      const bool narrow_vectors = width > 1 && has_narrow_rows<scalar_t>(p);  // float32 only
      return bytes <= (narrow_vectors ? kNarrowAtomicRowsBytes : kHotAtomicRowsBytes);
    }
  }
  return elements <= kAtomicRowsLimit && p.E <= kAtomicRowsLimit / 16 &&
         (kOwnAtomicType<scalar_t> || p.out.numel() <= kAtomicRowsLimit);
}

}  // namespace torchplug::core
