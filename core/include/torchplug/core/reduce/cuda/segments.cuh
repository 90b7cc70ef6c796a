#pragma once

// The segment strategy of the scatter family: the index plan's CSR
// (core/index_plan.cuh), or a caller's indptr (segment_csr), then one thread
// per (outer, row, column vector) combines its row's sources and writes the
// row's result once: no atomics, no identity fill, no read-modify-write of
// rows the L2 cannot hold, and the count of each row at hand for mean. Rows
// too long for one thread are hubs (core/reduce/cuda/hub_rows.cuh): their
// partials per block of the sorted order are combined in a fixed order. In
// deterministic mode (a stable permutation) and for a caller's indptr every
// row combines its sources in source order. Extra memory: the E-long
// permutation (not for narrow rows that take the atomic rows), O(N) offsets
// and the hubs' partials; never O(E x F).

#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/reduce/cuda/atomic_rows.cuh"
#include "torchplug/core/reduce/cuda/hub_rows.cuh"
#include "torchplug/core/reduce/index_plan.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/scratch.cuh"
#include "torchplug/core/reduce/policy.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>

#include <algorithm>
#include <limits>

namespace torchplug::core {

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

// Combines sources k .. k + U - 1 of a row into sum, with all U loads in flight.
// With an arg (min, max), arg[j] follows sum[j]: the smallest position of a
// source holding it, in offset_t like the positions (registers: they bound
// how many loads this latency-bound gather keeps in flight).
template <typename Policy, int U, bool kPermuted, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void add_sources(at::opmath_type<scalar_t> (&sum)[V], offset_t (&arg)[V],
                                            const scalar_t* column, const offset_t* perm,
                                            offset_t k, int64_t inner) {
  at::opmath_type<scalar_t> value[U][V];
  offset_t position[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    position[u] = kPermuted ? perm[k + u] : k + u;
    core::load_as<scalar_t, V>(column + static_cast<int64_t>(position[u]) * inner, value[u]);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int j = 0; j < V; ++j) combine_at<Policy, !kPermuted>(sum[j], arg[j], value[u][j], position[u]);
  }
}

// Combines sources k .. end - 1 of a row into sum: batches of 8, then, for a
// sorted index, one batch each of 4, 2 and 1, so that a row's last sources
// wait out at most three memory latencies. With a permutation that tail
// measured slower, so there it stays one source at a time.
template <typename Policy, bool kPermuted, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void add_row(at::opmath_type<scalar_t> (&sum)[V], offset_t (&arg)[V],
                                        const scalar_t* column, const offset_t* perm, offset_t k,
                                        offset_t end, int64_t inner) {
  for (; static_cast<int64_t>(k) + 8 <= end; k += 8) add_sources<Policy, 8, kPermuted>(sum, arg, column, perm, k, inner);
  if constexpr (kPermuted) {
    for (; k < end; ++k) add_sources<Policy, 1, kPermuted>(sum, arg, column, perm, k, inner);
  } else {
    if (end - k >= 4) {
      add_sources<Policy, 4, kPermuted>(sum, arg, column, perm, k, inner);
      k += 4;
    }
    if (end - k >= 2) {
      add_sources<Policy, 2, kPermuted>(sum, arg, column, perm, k, inner);
      k += 2;
    }
    if (k < end) add_sources<Policy, 1, kPermuted>(sum, arg, column, perm, k, inner);
  }
}

// What a segment kernel needs besides src and out (kernel parameters of their
// own: __restrict__ on a struct member does not reach the loads).
template <typename scalar_t, typename offset_t>
struct Segments {
  Csr<offset_t> csr;
  int64_t E, inner, outer, N;
  int64_t items;  // outer * N * (inner / V)
  HubBlocks hubs;
  HubIndex<offset_t> hub_index;
  bool accumulate;
  offset_t* next_tile;  // 0 at launch; see core::for_each_tile
  // min, max: the arg (out's layout), and how a position of this problem lies
  // along dim: (position / arg_inner) % arg_E (a flattened problem, see
  // scatter_cuda.cuh), or the position itself when arg_E is 0.
  int64_t* arg;
  int64_t arg_none, arg_inner, arg_E;
};

// A position of the problem as a position along dim.
template <typename scalar_t, typename offset_t>
__device__ __forceinline__ int64_t along_dim(const Segments<scalar_t, offset_t>& s, int64_t position) {
  return s.arg_E == 0 ? position : position / s.arg_inner % s.arg_E;
}

// Whether a row's sources go in increasing position (combine_at): sorted,
// and min or max (the other reductions take the same path either way).
template <typename Policy, bool kPermuted>
constexpr bool kInOrder = Policy::kHasArg && !kPermuted;

// A row's accumulators before its sources (`first`: the row's first
// position): out's values when accumulating, else the identity, with no arg
// yet; in order (kInOrder) the identity, with arg at `first`, and out's values
// after the sources (end_row).
template <typename Policy, bool kInOrder, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void start_row(at::opmath_type<scalar_t> (&sum)[V], offset_t (&arg)[V],
                                          const scalar_t* target, bool accumulate, offset_t first) {
  if (accumulate && !kInOrder) {
    core::load_as<scalar_t, V>(target, sum);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) sum[j] = Policy::template identity<at::opmath_type<scalar_t>>();
  }
#pragma unroll
  for (int j = 0; j < V; ++j) arg[j] = kInOrder ? first : std::numeric_limits<offset_t>::max();
}

// In order, out's values join after the sources when accumulating: one that
// wins leaves no arg.
template <typename Policy, bool kInOrder, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void end_row(at::opmath_type<scalar_t> (&sum)[V], offset_t (&arg)[V],
                                        const scalar_t* target, bool accumulate) {
  if constexpr (kInOrder) {
    if (!accumulate) return;
    at::opmath_type<scalar_t> before[V];
    core::load_as<scalar_t, V>(target, before);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (Policy::wins(before[j], sum[j])) {
        sum[j] = before[j];
        arg[j] = std::numeric_limits<offset_t>::max();
      }
    }
  }
}

// Writes a row's result (count sources combined) at target, and for min and
// max its arg along dim (none for an empty row), two at a time where V allows
// (arg is a fresh allocation: 16-byte aligned).
template <typename Policy, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void write_row(const Segments<scalar_t, offset_t>& s, const RowItem& item,
                                          scalar_t* target, const at::opmath_type<scalar_t> (&sum)[V],
                                          const offset_t (&arg)[V], int64_t count) {
  Vector<scalar_t, V> result;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    result.val[j] = static_cast<scalar_t>(core::finish<Policy>(sum[j], count, s.accumulate));
  }
  *reinterpret_cast<Vector<scalar_t, V>*>(target) = result;
  if constexpr (Policy::kHasArg) {
    constexpr int kPair = V % 2 == 0 ? 2 : 1;
    int64_t* at = s.arg + item.slot * s.inner + item.v * V;
#pragma unroll
    for (int j = 0; j < V; j += kPair) {
      Vector<int64_t, kPair> along;
#pragma unroll
      for (int k = 0; k < kPair; ++k) {
        const bool none = count == 0 || arg[j + k] == std::numeric_limits<offset_t>::max();
        along.val[k] = none ? s.arg_none : along_dim(s, arg[j + k]);
      }
      *reinterpret_cast<Vector<int64_t, kPair>*>(at + j) = along;
    }
  }
}

// One thread per (outer, row, column vector) item: combines the row's sources
// and writes the row's result once. A hub is left to the hub kernels, in
// the hub index.
// The kernel for each kind of index that may occur is launched (the
// permuted one unless an unsorted index takes the atomic rows); one that
// does not match *unsorted returns. The items go out in tiles taken in
// order (core::for_each_tile), *next_tile counting the tiles taken. Kept
// lean on purpose: 64-bit divisions per item, a perm check per source or one
// kernel for both kinds (the registers of the sorted one) each cost this
// gather a measurable share of its bandwidth.
template <typename Policy, typename scalar_t, int V, typename offset_t, bool kPermuted>
__device__ __forceinline__ void segment_reduce(const scalar_t* __restrict__ src,
                                            scalar_t* __restrict__ out,
                                            const Segments<scalar_t, offset_t>& s) {
  using acc_t = at::opmath_type<scalar_t>;
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if ((*s.csr.unsorted != 0) != kPermuted) return;
  const int64_t vectors = s.inner / V;
  core::for_each_tile(s.items, s.next_tile, [&](int64_t t) {
    const RowItem item = row_item(t, vectors, s.outer, s.N);
    offset_t start, end;
    s.csr.bounds(item.row, kPermuted, start, end);
    if (s.hubs.is_hub(start, end)) {
      if (item.o == 0) s.hub_index.add(s.hubs, item.row, start, end, item.v, vectors);
      return;
    }
    const scalar_t* column = src + item.o * s.E * s.inner + item.v * V;
    scalar_t* target = out + item.slot * s.inner + item.v * V;
    acc_t sum[V];
    offset_t arg[V];
    constexpr bool kSourceOrder = kInOrder<Policy, kPermuted>;
    start_row<Policy, kSourceOrder>(sum, arg, target, s.accumulate, start);
    add_row<Policy, kPermuted, scalar_t, V>(sum, arg, column, s.csr.perm, start, end, s.inner);
    end_row<Policy, kSourceOrder>(sum, arg, target, s.accumulate);
    write_row<Policy>(s, item, target, sum, arg, end - start);
  });
}

template <typename Policy, typename scalar_t, int V, typename offset_t, bool kPermuted>
__global__ void segment_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ out,
                               Segments<scalar_t, offset_t> s) {
  segment_reduce<Policy, scalar_t, V, offset_t, kPermuted>(src, out, s);
}

// The permuted gather waits on scattered loads and wants every warp an SM
// holds: capped at 32 registers (8 blocks of 256 threads per SM) it ran
// faster at F=64 and slightly slower at F=256 (docs/benchmarks.md). 8- and
// 16-bit integer types would spill hundreds of bytes under the cap; the cap is
// kept to floating types (float32 and half spill 8 bytes, bfloat16 and double
// nothing) with 32-bit offsets. Min and max keep a position per value: 32
// registers spilled hundreds of bytes and ran 2x slower, so they are capped at
// 64 (4 blocks), down from the 80 float32 takes at F=64. A kernel of its own,
// not a template argument of segment_kernel: any __launch_bounds__, even
// (256, 1), changes how ptxas allocates the uncapped kernels' registers (40 ->
// 54 for the sorted float one).
template <typename Policy, typename scalar_t, typename offset_t>
constexpr bool kCapPermutedRegisters =
    std::is_floating_point_v<at::opmath_type<scalar_t>> && sizeof(offset_t) == 4;

template <typename Policy>
constexpr int kPermutedBlocksPerSm = Policy::kHasArg ? 4 : 8;

template <typename Policy, typename scalar_t, int V, typename offset_t>
__global__ void __launch_bounds__(core::kThreadsPerBlock, kPermutedBlocksPerSm<Policy>)
    capped_permuted_segment_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ out,
                                   Segments<scalar_t, offset_t> s) {
  segment_reduce<Policy, scalar_t, V, offset_t, true>(src, out, s);
}

// Sets the first `vectors` vectors of V values of out to the policy's
// identity when has_work().
template <typename Policy, typename scalar_t, int V, typename Gate>
__global__ void identity_kernel(scalar_t* __restrict__ out, int64_t vectors, Gate has_work) {
  if (!has_work()) return;
  Vector<scalar_t, V> identity;
#pragma unroll
  for (int j = 0; j < V; ++j) identity.val[j] = Policy::template identity<scalar_t>();
  TORCHPLUG_GRID_STRIDE_LOOP(t, vectors) reinterpret_cast<Vector<scalar_t, V>*>(out)[t] = identity;
}

template <typename Policy, typename scalar_t, int V, typename offset_t>
__global__ void hub_partials_kernel(const scalar_t* __restrict__ src, Csr<offset_t> csr, HubIndex<offset_t> hub_index,
                                    HubPartials<at::opmath_type<scalar_t>, offset_t> partials, int64_t E,
                                    int64_t inner, int64_t items) {
  using acc_t = at::opmath_type<scalar_t>;
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if (hub_index.none()) return;
  const bool permuted = *csr.unsorted != 0;
  const int64_t vectors = inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t v = t % vectors;
    const int64_t block = t / vectors % partials.hubs.blocks;
    const int64_t o = t / vectors / partials.hubs.blocks;
    const scalar_t* column = src + o * E * inner + v * V;
    partials.hubs.for_each_run(HubLevel::kBlock, block, E, hub_index,
                               [&](int64_t from, int64_t to, int64_t partial) {
      acc_t sum[V];
      offset_t arg[V];
      const auto first = static_cast<offset_t>(from), last = static_cast<offset_t>(to);
      // See start_row: in order, held at the run's first position.
      partials.template start<Policy>(sum, arg, permuted ? std::numeric_limits<offset_t>::max() : first);
      if (permuted) {
        add_row<Policy, true, scalar_t, V>(sum, arg, column, csr.perm, first, last, inner);
      } else {
        add_row<Policy, false, scalar_t, V>(sum, arg, column, csr.perm, first, last, inner);
      }
      partials.template store<Policy>(o, partial, inner, v * V, sum, arg);
    });
  }
}

// Merges, in block order, the block partials of each hub crossing a group
// boundary into its partial of each group.
template <typename Policy, typename scalar_t, int V, typename offset_t>
__global__ void hub_groups_kernel(HubIndex<offset_t> hub_index,
                                  HubPartials<at::opmath_type<scalar_t>, offset_t> partials, int64_t E, int64_t inner,
                                  int64_t items) {
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if (hub_index.none()) return;
  const int64_t vectors = inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t v = t % vectors;
    const int64_t group = t / vectors % partials.hubs.groups;
    const int64_t o = t / vectors / partials.hubs.groups;
    partials.hubs.for_each_run(HubLevel::kGroup, group, E, hub_index,
                               [&](int64_t from, int64_t to, int64_t partial) {
      partials.template merge_group<Policy, V>(o, from, to, partial, inner, v * V);
    });
  }
}

// Writes each hub's result from its group (or block) partials in order
// (combined after out's values when accumulating), with its arg for min and
// max.
template <typename Policy, typename scalar_t, int V, typename offset_t>
__global__ void store_hubs_kernel(HubPartials<at::opmath_type<scalar_t>, offset_t> partials,
                                  scalar_t* __restrict__ out, Segments<scalar_t, offset_t> s) {
  using acc_t = at::opmath_type<scalar_t>;
  core::wait_for_previous_kernel();
  if (s.hub_index.none()) return;
  const bool permuted = *s.csr.unsorted != 0;
  s.hub_index.for_each_hub_item(s.outer, s.N, s.inner / V, [&](int64_t o, int64_t row, int64_t v) {
    const RowItem item{o * s.N + row, o, row, v};
    offset_t start, end;
    s.csr.bounds(item.row, permuted, start, end);
    if (!s.hubs.is_hub(start, end)) return;
    scalar_t* target = out + item.slot * s.inner + item.v * V;
    acc_t sum[V];
    offset_t arg[V];
    start_row<Policy, false>(sum, arg, target, s.accumulate, start);
    partials.template merge_hub<Policy>(item.o, start, end, s.inner, item.v * V, sum, arg);
    write_row<Policy>(s, item, target, sum, arg, end - start);
  });
}

// How positions of p lie along dim, for the arg: (position / inner) % E, or
// the position itself when E is 0.
struct ArgPositions {
  int64_t inner = 1, E = 0, none = 0;
};

// A plan's counters for the segments: the tiles taken by the sorted and the
// permuted kernel, then the hub index's.
constexpr int64_t kSegmentTileCounters = 2;
inline int64_t segment_counters(int64_t E) { return kSegmentTileCounters + hub_index_counters(E); }

// The segments and hubs over a plan, all queued at once (hubs only when E
// exceeds the hub limit). `index`: the index the plan was built from, or null
// for a caller's CSR (never permuted). For narrow rows (has_narrow_rows) of
// a reduction with nothing to finish (sum, mul) an unsorted index takes the
// atomic rows instead of the permutation (`atomics_if_unsorted`; several
// times faster with a random or a skewed index, docs/benchmarks.md): the
// identity fill and the atomic rows are queued too and return unless the
// probe or the counting pass flagged the index unsorted. A stable
// permutation (deterministic mode) gives every row its sources in source
// order: with the hubs' fixed order, deterministic results.
template <typename Policy, typename scalar_t, typename offset_t>
void reduce_planned(const ScatterProblem& p, const core::IndexPlan<offset_t>& plan, const int64_t* index,
                    bool atomics_if_unsorted, ArgPositions positions) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr bool kFinishes = Policy::kHasArg || Policy::kDividesByCount;
  const core::Csr<offset_t> csr = plan.csr();
  const auto* src = p.src.const_data_ptr<scalar_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  core::with_vector_width<scalar_t>(p.inner, {src, out}, [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t vectors = p.inner / V;
    const int64_t rows = p.outer * p.N * vectors;
    const HubBlocks hubs = HubBlocks::of(p.E, rows, p.outer * p.E * vectors);
    const int64_t hub_rows = p.E > hubs.limit ? HubIndex<offset_t>::capacity_for(p.E, hubs) : 0;
    const at::Tensor listed = scratch({hub_rows}, plan.stats.options().dtype(at::kLong));
    const auto hub_index = HubIndex<offset_t>::in(plan.counter(kSegmentTileCounters), listed);
    const Segments<scalar_t, offset_t> sorted{csr,
                                              p.E,
                                              p.inner,
                                              p.outer,
                                              p.N,
                                              rows,
                                              hubs,
                                              hub_index,
                                              p.accumulate,
                                              plan.counter(0),
                                              Policy::kHasArg ? p.arg.mutable_data_ptr<int64_t>() : nullptr,
                                              positions.none,
                                              positions.inner,
                                              positions.E};
    core::launch_one_wave_chained(segment_kernel<Policy, scalar_t, V, offset_t, false>, rows, src, out, sorted);
    // A caller's CSR (no index) is sorted: no permuted kernel.
    if (index != nullptr && atomics_if_unsorted) {
      if constexpr (kOwnAtomicType<scalar_t> && !kFinishes) {  // acc_t is scalar_t: straight into out
        const IfSet<offset_t> unsorted{plan.unsorted()};
        if (!p.accumulate) {
          core::launch_one_wave(identity_kernel<Policy, scalar_t, V, IfSet<offset_t>>, rows, out,
                                rows, unsorted);
        }
        launch_atomic_rows<Policy>(p, src, out, unsorted);
      }
    } else if (index != nullptr) {
      Segments<scalar_t, offset_t> permuted = sorted;
      permuted.next_tile = plan.counter(1);
      const auto permuted_kernel = [] {
        if constexpr (kCapPermutedRegisters<Policy, scalar_t, offset_t>) {
          return capped_permuted_segment_kernel<Policy, scalar_t, V, offset_t>;
        } else {
          return segment_kernel<Policy, scalar_t, V, offset_t, true>;
        }
      }();
      core::launch_one_wave_chained(permuted_kernel, rows, src, out, permuted);
    }
    if (p.E <= hubs.limit) return;
    const int64_t partial_values = p.outer * hubs.partials() * p.inner;
    const at::Tensor values = scratch({partial_values}, p.src.options().dtype(at::toOpMathType(p.src.scalar_type())));
    const at::Tensor args = scratch({Policy::kHasArg ? partial_values : 0}, plan.stats.options());
    const HubPartials<acc_t, offset_t> partials{values.mutable_data_ptr<acc_t>(), args.mutable_data_ptr<offset_t>(),
                                               hubs};
    const int64_t items = p.outer * hubs.blocks * vectors;
    core::launch_one_wave_chained(hub_partials_kernel<Policy, scalar_t, V, offset_t>, items, src, csr, hub_index,
                                  partials, p.E, p.inner, items);
    if (hubs.groups > 1) {
      const int64_t groups = p.outer * hubs.groups * vectors;
      core::launch_one_wave_chained(hub_groups_kernel<Policy, scalar_t, V, offset_t>, groups, hub_index, partials,
                                    p.E, p.inner, groups);
    }
    core::launch_one_wave_chained(store_hubs_kernel<Policy, scalar_t, V, offset_t>, p.outer * hub_rows * vectors,
                                  partials, out, sorted);
  });
}

// 1-D index: the CSR of the index (core/index_plan.cuh), then the segments.
// Offsets are 32-bit while E allows: half the bytes and faster atomics.
template <typename Policy, typename scalar_t, typename offset_t>
void csr_reduce(const ScatterProblem& p, bool ordered, ArgPositions positions) {
  constexpr bool kFinishes = Policy::kHasArg || Policy::kDividesByCount;
  const bool atomics_if_unsorted = !kFinishes && !ordered && has_narrow_rows<scalar_t>(p);
  core::PlanOptions options;
  options.permutation = ordered ? core::Permutation::kStable
                        : atomics_if_unsorted ? core::Permutation::kNone
                                              : core::Permutation::kAtomic;
  options.probe = atomics_if_unsorted;
  options.counters = segment_counters(p.E);
  const auto plan = core::plan_index<offset_t>(p.index, p.E, p.N, options);
  reduce_planned<Policy, scalar_t>(p, plan, p.index.const_data_ptr<int64_t>(), atomics_if_unsorted, positions);
}

// segment_csr: the caller's indptr ([N + 1], int64) as the plan; p.index unused.
template <typename Policy, typename scalar_t, typename offset_t>
void indptr_reduce(const ScatterProblem& p, const at::Tensor& indptr) {
  const auto plan = core::plan_from_indptr<offset_t>(indptr, p.E, segment_counters(p.E));
  reduce_planned<Policy, scalar_t>(p, plan, nullptr, false, ArgPositions{p.inner, 0, p.E});
}

}  // namespace torchplug::core
