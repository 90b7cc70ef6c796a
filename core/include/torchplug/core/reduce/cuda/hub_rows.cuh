#pragma once

// Hub rows: how every reduction on CUDA (scatter, segment, the composites,
// spmm) splits a row too long for one thread and combines it again. The
// sorted order of the sources is cut into blocks of `size` positions, and a
// row with more sources than a block holds is a hub. One thread per (outer
// index, block, column vector) combines, in order, each hub's sources inside
// its block into a partial (HubBlocks::for_each_run). A block meets at most
// two hubs, each being longer than a block: one covering its first position,
// partial 2b, and one starting inside it, partial 2b + 1. A last pass
// combines each hub's partials in block order (HubBlocks::for_each_partial).
// No atomics: with the sources of each row in a fixed order (a sorted index,
// a caller's indptr, deterministic mode's stable permutation) a hub gives the
// same bits every run, and a hub of 10^6 sources spreads over a thousand
// threads.
// Extra memory: 2 ceil(positions / size) partial states per column vector
// and outer index.

#include <ATen/ceil_div.h>

#include <cstdint>

namespace torchplug::core {

// No row longer than this stays on one thread.
constexpr int64_t kMaxSegment = 1024;
// With fewer row items (rows x column vectors) than kHubItems, a few waves
// of a GPU, the block shrinks until the blocks give about as many items:
// few long segments (global pooling) would otherwise leave one thread
// walking each. With more rows it stays kMaxSegment: a hub's partials are
// combined by one thread, and smaller blocks cost a power-law index more
// (docs/benchmarks.md).
constexpr int64_t kHubItems = int64_t{1} << 20;
constexpr int64_t kMinHubBlock = 32;

// The block for `rows` row items and `work` source items (sources x column
// vectors): a power of two in [kMinHubBlock, kMaxSegment].
inline int64_t hub_block_size(int64_t rows, int64_t work) {
  if (rows >= kHubItems) return kMaxSegment;
  int64_t block = kMinHubBlock;
  while (block < kMaxSegment && block * kHubItems < work) block *= 2;
  return block;
}

struct HubBlocks {
  int64_t size;    // positions per block; a longer row is a hub
  int64_t blocks;  // ceil(positions / size)

  static HubBlocks of(int64_t positions, int64_t size) { return {size, at::ceil_div<int64_t>(positions, size)}; }

  // Partials per outer index.
  __host__ __device__ int64_t partials() const { return 2 * blocks; }

  // Where partial `partial` of outer index o starts in [outer][partials()][inner].
  __device__ int64_t at(int64_t o, int64_t partial, int64_t inner) const { return (o * partials() + partial) * inner; }

  __host__ __device__ bool is_hub(int64_t start, int64_t end) const { return end - start > size; }

  // For each hub among positions [block * size, min(.., positions)):
  // run(from, to, partial), its sources there and its partial's index.
  // row_at(k) is the row of position k, bounds(row, start, end) its range.
  template <typename RowAt, typename Bounds, typename Run>
  __device__ __forceinline__ void for_each_run(int64_t block, int64_t positions, RowAt row_at, Bounds bounds,
                                               Run run) const {
    const int64_t first = block * size, last = first + size < positions ? first + size : positions;
    if (first >= last) return;
    for (int at_last = 0; at_last < 2; ++at_last) {
      int64_t start, end;
      bounds(row_at(at_last ? last - 1 : first), start, end);
      const bool starts_inside = start > first;
      // The row at the last position is done already when it covers the first.
      if (!is_hub(start, end) || (at_last && !starts_inside)) continue;
      run(starts_inside ? start : first, end < last ? end : last, 2 * block + (starts_inside ? 1 : 0));
    }
  }

  // take(partial) for each partial of the hub [start, end), in block order.
  template <typename Take>
  __device__ __forceinline__ void for_each_partial(int64_t start, int64_t end, Take take) const {
    const int64_t last_block = (end - 1) / size;
    // A hub has up to thousands of partials: unrolled, their loads go out together.
#pragma unroll 8
    for (int64_t block = start / size; block <= last_block; ++block) take(2 * block + (start > block * size ? 1 : 0));
  }
};

}  // namespace torchplug::core
