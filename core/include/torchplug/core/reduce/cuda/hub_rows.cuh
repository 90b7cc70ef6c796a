#pragma once

// Hub rows: how every reduction on CUDA (scatter, segment, the composites,
// spmm) splits a row too long for one thread and combines it again. A row
// with more than `limit` sources is a hub. The sorted order of the sources
// is cut into blocks of `size` <= limit positions, and 32 consecutive blocks
// (kHubGroup) form a group. Three passes, no atomics:
//   - one thread per (outer index, block, column vector) combines, in
//     order, each hub's sources inside its block into a block partial
//     (HubBlocks::for_each_run, HubLevel::kBlock). A block meets at most two
//     hubs, each being longer than a block: one covering its first position,
//     partial 2b, and one starting inside it, partial 2b + 1;
//   - one thread per (outer index, group, column vector) merges, in block
//     order, the block partials of each hub crossing a group boundary into a
//     group partial (HubLevel::kGroup). At most two such hubs meet a group:
//     one covering its first position, partial 2g after the block partials,
//     and one starting inside it, 2g + 1. The hubs inside one group (a group
//     can hold many) are left to
//   - one thread per (hub, column vector), which merges the hub's group
//     partials in group order, or, for a hub inside one group, its (at most
//     32) block partials (HubBlocks::for_each_hub_partial).
// The row pass records each hub it meets in a HubIndex: the passes find the
// hubs of a block or a group there, and the last one walks the hubs alone,
// not every row.
// Small blocks keep the walks of a power-law index short, and the groups
// keep the merge of a hub of L sources at L / (32 size) + 2 partials. With
// the sources of each row in a fixed order (a sorted index, a caller's
// indptr, deterministic mode's stable permutation) the combine order is
// fixed too: a hub gives the same bits every run.
// Extra memory: 2 (blocks + groups) partial states per column vector and
// outer index, and the HubIndex: 1 + 2 E / kMinHubBlock offsets zeroed with
// the plan's counters, E / limit rows.

#include "torchplug/core/atomic.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/reduce/policy.cuh"

#include <ATen/ceil_div.h>
#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace torchplug::core {

// No row longer than this stays on one thread.
constexpr int64_t kMaxSegment = 1024;
// Waves of the device (core::resident_threads) that the hub blocks fill.
// The block is the smallest power of two in [kMinHubBlock, kMaxSegment] that
// keeps the block items (outer x blocks x column vectors) to kHubWaves waves:
// a thread walking a block of 1024 permuted positions waits out 128 memory
// latencies or more (docs/benchmarks.md). Under a wave of row items (rows x
// column vectors) the block is the power of two that makes the block items
// nearest one wave: a thousand graphs of a thousand nodes would otherwise be
// cut into blocks of 32 and merged back, and blocks making half a wave
// leave rows of a thousand with one thread each. The limit is the block, so
// that no thread walks a row longer than a block pass does (a power-law
// index's rows of a few hundred sources would otherwise hold up the call);
// with a wave of row items or more it grows to twice the mean row, so that
// a batch of small graphs keeps its rows on one thread each, none of them a
// hub.
constexpr int64_t kHubWaves = 8;
constexpr int64_t kMinHubBlock = 32;
// Blocks per group.
constexpr int64_t kHubGroup = 32;

// Which partials a pass writes: per block of the sorted order, or per group
// of kHubGroup blocks.
enum class HubLevel { kBlock, kGroup };

struct HubBlocks {
  int64_t limit;   // a row with more sources is a hub
  int64_t size;    // positions per block, <= limit
  int64_t blocks;  // ceil(positions / size)
  int64_t groups;  // ceil(blocks / kHubGroup)

  // For `positions` sources, `rows` row items and `work` source items, on
  // the current device: with a wave of row items or more, size the smallest
  // power of two in [kMinHubBlock, kMaxSegment] with size * kHubWaves waves
  // >= work and limit that size, doubled up to kMaxSegment while under twice
  // the mean row; under a wave, size and limit the power of two nearest
  // work / wave (within a factor of sqrt 2).
  static HubBlocks of(int64_t positions, int64_t rows, int64_t work) {
    const int64_t wave = resident_threads();
    int64_t size = kMinHubBlock;
    int64_t limit;
    if (rows >= wave) {
      while (size < kMaxSegment && size * kHubWaves * wave < work) size *= 2;
      limit = size;
      while (limit < kMaxSegment && limit * rows < 2 * work) limit *= 2;
    } else {
      const double per_wave = static_cast<double>(work) / static_cast<double>(wave);
      while (size < kMaxSegment && size * std::sqrt(2.0) < per_wave) size *= 2;
      limit = size;
    }
    const int64_t blocks = at::ceil_div<int64_t>(positions, size);
    return {limit, size, blocks, at::ceil_div<int64_t>(blocks, kHubGroup)};
  }

  // Partials per outer index: [2 blocks block partials | 2 groups group partials].
  __host__ __device__ int64_t partials() const { return 2 * (blocks + groups); }

  // Where partial `partial` of outer index o starts in [outer][partials()][inner].
  __device__ int64_t at(int64_t o, int64_t partial, int64_t inner) const { return (o * partials() + partial) * inner; }

  __host__ __device__ bool is_hub(int64_t start, int64_t end) const { return end - start > limit; }

  // Whether the group pass merges hub [start, end): it crosses a group boundary.
  __device__ bool crosses_groups(int64_t start, int64_t end) const {
    return start / span(HubLevel::kGroup) != (end - 1) / span(HubLevel::kGroup);
  }

  __device__ int64_t span(HubLevel level) const { return level == HubLevel::kBlock ? size : kHubGroup * size; }

  // The partial of unit `unit` (a block or a group) for the hub starting at `start`.
  __device__ int64_t partial(HubLevel level, int64_t unit, int64_t start) const {
    return (level == HubLevel::kBlock ? 0 : 2 * blocks) + 2 * unit + (start > unit * span(level) ? 1 : 0);
  }

  // For each hub among positions [unit * span, min(.., positions)) of a
  // block (every hub) or a group (the hubs crossing a group boundary):
  // run(from, to, partial), its sources there and its partial's index.
  // `positions` is all of them (E), not the last row's end: a malformed
  // CSR's hub may run past that, and the last pass merges a partial for
  // every unit of its range (overlapping hubs can still miss one). Two
  // can meet a unit: the hub covering its first position, and one starting
  // inside it, which, longer than a block, covers the next unit's first
  // position (or ends at `positions`, which would make it shorter than a
  // block). Each is checked against the unit, so that a malformed CSR's
  // overlapping rows never take a run outside it.
  template <typename Index, typename Run>
  __device__ __forceinline__ void for_each_run(HubLevel level, int64_t unit, int64_t positions, const Index& index,
                                               Run run) const {
    const int64_t first = unit * span(level), last = first + span(level) < positions ? first + span(level) : positions;
    if (first >= last) return;
    int64_t start, end;
    if (index.covering(first / size, start, end) && start <= first && first < end &&
        (level == HubLevel::kBlock || crosses_groups(start, end))) {
      run(first, end < last ? end : last, partial(level, unit, start));
    }
    if (last < positions && index.covering(last / size, start, end) && first < start && start < last) {
      run(start, last, partial(level, unit, start));
    }
  }

  // take(partial) for each partial of the hub [start, end) at `level`, in
  // order; also of a hub's run in a group (for_each_run's from, to): a run
  // from the group's first position, a block boundary, names the partials of
  // a hub that starts before it.
  template <typename Take>
  __device__ __forceinline__ void for_each_partial(HubLevel level, int64_t start, int64_t end, Take take) const {
    const int64_t last_unit = (end - 1) / span(level);
    // Unrolled, the loads of a hub's partials go out together.
#pragma unroll 8
    for (int64_t unit = start / span(level); unit <= last_unit; ++unit) take(partial(level, unit, start));
  }

  // The last pass: take(partial) for each partial of the hub [start, end).
  template <typename Take>
  __device__ __forceinline__ void for_each_hub_partial(int64_t start, int64_t end, Take take) const {
    for_each_partial(crosses_groups(start, end) ? HubLevel::kGroup : HubLevel::kBlock, start, end, take);
  }
};

// Offsets a HubIndex takes among a plan's zeroed counters for E sources:
// its count and, per block of the smallest size, a hub's [start, end).
inline int64_t hub_index_counters(int64_t E) { return 1 + 2 * at::ceil_div<int64_t>(E, kMinHubBlock); }

// The hubs the row pass met, for the hub passes: how many (none: the passes
// return), their rows in no order (the last pass walks these, not every
// row), and for each block the hub covering its first position (the block
// and group passes read it, with no search for a position's row). `found`
// and `cover` lie in zeroed memory, hub_index_counters offsets from `at`
// (HubIndex::in); an end of 0 means no hub.
template <typename offset_t>
struct HubIndex {
  offset_t* found;   // hubs met
  offset_t* cover;   // [2 * blocks]: start and end of the hub covering block b's first position
  int64_t* rows;     // [capacity]: the first found, when they fit
  // positions / (limit + 1) + 1, every hub of a valid CSR; a malformed one's
  // overlapping rows can make more (for_each_hub_item)
  int64_t capacity;

  // The index in the zeroed offsets from `at` (hub_index_counters of them)
  // and a list of `positions / (limit + 1) + 1` rows.
  static HubIndex in(offset_t* at, const at::Tensor& list) {
    return {at, at + 1, list.mutable_data_ptr<int64_t>(), list.numel()};
  }
  static int64_t capacity_for(int64_t positions, const HubBlocks& hubs) { return positions / (hubs.limit + 1) + 1; }

  // Records hub `row`, [start, end), from the row pass's item `lane` of
  // `lanes` (its column vectors): lane 0 lists it, and the lanes share the
  // blocks whose first position it covers.
  __device__ __forceinline__ void add(const HubBlocks& hubs, int64_t row, int64_t start, int64_t end, int64_t lane,
                                      int64_t lanes) const {
    if (lane == 0) {
      const int64_t slot = fetch_add(found, offset_t{1});
      if (slot >= 0 && slot < capacity) rows[slot] = row;
    }
    for (int64_t block = at::ceil_div<int64_t>(start, hubs.size) + lane; block * hubs.size < end; block += lanes) {
      cover[2 * block] = static_cast<offset_t>(start);
      cover[2 * block + 1] = static_cast<offset_t>(end);
    }
  }

  __device__ __forceinline__ bool none() const { return *found == 0; }

  // The last pass's items, spread over the grid: each(o, row, v) for every
  // (outer index, listed hub, column vector), or, where more hubs were met
  // than the list holds (a malformed CSR's overlapping rows; a count past
  // offset_t's range reads negative), for every (outer index, row, column
  // vector), `each` passing over the rows that are no hub.
  template <typename Each>
  __device__ __forceinline__ void for_each_hub_item(int64_t outer, int64_t N, int64_t vectors, Each each) const {
    const int64_t met = *found;
    const bool all_listed = met >= 0 && met <= capacity;
    const int64_t units = all_listed ? met : N;
    TORCHPLUG_GRID_STRIDE_LOOP(t, outer * units * vectors) {
      const int64_t unit = t / vectors % units;
      each(t / vectors / units, all_listed ? rows[unit] : unit, t % vectors);
    }
  }

  // The hub covering block b's first position, if one does.
  __device__ __forceinline__ bool covering(int64_t block, int64_t& start, int64_t& end) const {
    start = cover[2 * block];
    end = cover[2 * block + 1];
    return end != 0;
  }
};

// The hubs' partials: [outer][hubs.partials()][inner] accumulators, and for
// min and max the position holding each. Every family's hub passes start,
// store and merge their V accumulators of a column vector here.
template <typename acc_t, typename position_t>
struct HubPartials {
  acc_t* value;
  position_t* arg;
  HubBlocks hubs;

  // A partial before its first source: partial_identity, so that a hub of
  // -0.0 sources into a -0.0 of out= stays -0.0; `held` at `position` (the
  // block's first, for a block walked in order) or at none.
  template <typename Policy, int V>
  __device__ __forceinline__ static void start(acc_t (&sum)[V], position_t (&held)[V],
                                               position_t position = std::numeric_limits<position_t>::max()) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      sum[j] = partial_identity<Policy, acc_t>();
      held[j] = position;
    }
  }

  // Stores sum (and held) as partial `partial` of outer index o, columns
  // [column, column + V) of inner.
  template <typename Policy, int V>
  __device__ __forceinline__ void store(int64_t o, int64_t partial, int64_t inner, int64_t column,
                                        const acc_t (&sum)[V], const position_t (&held)[V]) const {
    const int64_t slot = hubs.at(o, partial, inner) + column;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      value[slot + j] = sum[j];
      if constexpr (Policy::kHasArg) arg[slot + j] = held[j];
    }
  }

  // Combines partial `partial` into sum (and held), after what they hold.
  template <typename Policy, int V>
  __device__ __forceinline__ void merge_into(int64_t o, int64_t partial, int64_t inner, int64_t column,
                                             acc_t (&sum)[V], position_t (&held)[V]) const {
    const int64_t slot = hubs.at(o, partial, inner) + column;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const position_t position = Policy::kHasArg ? arg[slot + j] : position_t{0};
      combine_at<Policy, false>(sum[j], held[j], value[slot + j], position);
    }
  }

  // The group pass: merges, in block order, the block partials of a hub's
  // run [from, to) in a group into its group partial `partial`.
  template <typename Policy, int V>
  __device__ __forceinline__ void merge_group(int64_t o, int64_t from, int64_t to, int64_t partial, int64_t inner,
                                              int64_t column) const {
    acc_t sum[V];
    position_t held[V];
    start<Policy>(sum, held);
    hubs.for_each_partial(HubLevel::kBlock, from, to,
                          [&](int64_t block_partial) { merge_into<Policy>(o, block_partial, inner, column, sum, held); });
    store<Policy>(o, partial, inner, column, sum, held);
  }

  // The last pass: merges, in order, every partial of hub [first, last) into sum (and held).
  template <typename Policy, int V>
  __device__ __forceinline__ void merge_hub(int64_t o, int64_t first, int64_t last, int64_t inner, int64_t column,
                                            acc_t (&sum)[V], position_t (&held)[V]) const {
    hubs.for_each_hub_partial(first, last,
                              [&](int64_t partial) { merge_into<Policy>(o, partial, inner, column, sum, held); });
  }
};

}  // namespace torchplug::core
