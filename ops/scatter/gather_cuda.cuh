#pragma once

// The gather kernels of gather_coo, gather_csr and scatter's backward: each
// output row is one source row (or zeros for a row outside [0, N)), copied in
// vectors of V values, each thread with several vectors' loads in flight: one
// vector per thread left the gather latency-bound, memory idle part of the
// time. gather_coo reads each position's row from its index; gather_csr finds
// it from indptr a tile of positions at a time, with no E-long rows tensor.

#include "scatter_kernel.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Dispatch_v2.h>
#include <ATen/ceil_div.h>

#include <algorithm>
#include <limits>

namespace torchplug::scatter_detail {

constexpr int kGatherUnroll = 4;
constexpr int kGatherChunk = core::kThreadsPerBlock * kGatherUnroll;  // items a block copies at once

// The items of a gather: t = (o * E + e) * vectors + v. index_t is 32-bit while
// the items allow: a 64-bit division per item costs more than the copy.
template <typename index_t>
struct GatherShape {
  index_t outer, E, vectors, items;
  int64_t N;

  __device__ index_t position(index_t t) const { return t / vectors; }  // o * E + e
  __device__ index_t slice(index_t oe) const { return outer == 1 ? 0 : oe / E; }
};

// Copies items begin + u * blockDim.x + threadIdx.x (u < kGatherUnroll, those
// before end), item u from row rows[u] of its slice.
template <typename scalar_t, int V, typename index_t>
__device__ __forceinline__ void copy_items(const scalar_t* __restrict__ src, scalar_t* __restrict__ out,
                                           const GatherShape<index_t>& shape, index_t begin, index_t end,
                                           const int64_t (&rows)[kGatherUnroll]) {
  using Vec = core::Vector<scalar_t, V>;
  Vec value[kGatherUnroll];
#pragma unroll
  for (int u = 0; u < kGatherUnroll; ++u) {
    const index_t t = begin + u * blockDim.x + threadIdx.x;
    if (t >= end) break;
    const index_t oe = shape.position(t);
    const int64_t row = rows[u];
    if (row >= 0 && row < shape.N) {
      const int64_t at = (static_cast<int64_t>(shape.slice(oe)) * shape.N + row) * shape.vectors;
      value[u] = reinterpret_cast<const Vec*>(src)[at + (t - oe * shape.vectors)];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) value[u].val[j] = scalar_t(0);
    }
  }
#pragma unroll
  for (int u = 0; u < kGatherUnroll; ++u) {
    const index_t t = begin + u * blockDim.x + threadIdx.x;
    if (t >= end) break;
    reinterpret_cast<Vec*>(out)[t] = value[u];
  }
}

// gather_coo: position o * E + e takes row index[e] (index[o * E + e] when
// each slice has its own).
template <typename scalar_t, int V, typename index_t>
__global__ void gather_coo_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                                  scalar_t* __restrict__ out, GatherShape<index_t> shape,
                                  bool index_per_outer) {
  for (index_t begin = blockIdx.x * kGatherChunk; begin < shape.items; begin += gridDim.x * kGatherChunk) {
    const index_t end = min(begin + kGatherChunk, shape.items);
    int64_t rows[kGatherUnroll];
#pragma unroll
    for (int u = 0; u < kGatherUnroll; ++u) {
      const index_t t = begin + u * blockDim.x + threadIdx.x;
      if (t >= end) break;
      const index_t oe = shape.position(t);
      rows[u] = __ldg(index + (index_per_outer ? oe : oe - shape.slice(oe) * shape.E));
    }
    copy_items<scalar_t, V>(src, out, shape, begin, end, rows);
  }
}

// The last r in [0, high] with bound(r) <= e, or -1 when there is none, found
// by the whole warp: each round probes 32 points of the range, so that a
// million rows take four dependent reads instead of twenty.
template <typename Bound>
__device__ __forceinline__ int64_t warp_last_at_or_before(Bound bound, int64_t high, int64_t e) {
  const int lane = threadIdx.x % 32;
  int64_t low = 0;  // the answer lies in [low - 1, high]
  while (low <= high) {
    const int64_t step = at::ceil_div<int64_t>(high - low + 1, 32);
    const int64_t probe = low + lane * step;
    const unsigned at_or_before = __ballot_sync(0xffffffffu, probe <= high && bound(probe) <= e);
    if (at_or_before == 0) break;
    const int64_t at = low + (31 - __clz(at_or_before)) * step;
    if (step == 1) return at;
    low = at + 1;
    high = min(high, at + step - 1);
  }
  return low - 1;
}

constexpr int kWarpsPerBlock = core::kThreadsPerBlock / 32;
constexpr int kCsrLanePositions = 8;  // positions a lane owns in a tile, at most
// Vectors a lane has in flight: 128 bytes, 16 vectors at most, with the
// registers that takes (two blocks an SM at 16-byte vectors): 64 bytes, or a
// cap of 64 registers, left wide rows slower (docs/benchmarks.md).
template <typename scalar_t, int V>
constexpr int kCsrUnroll = std::min(16, 128 / static_cast<int>(sizeof(scalar_t) * V));

// gather_csr's tiles: `lane_positions` * 32 consecutive positions of one slice.
struct CsrTiles {
  int64_t E, N, vectors;
  int64_t lane_positions, per_slice, count;
  int lane_step_positions, lane_step_vectors;  // 32 items on: 32 / vectors, 32 % vectors
};

// gather_csr with one indptr [N + 1] for every slice: position e takes the
// last row r <= N whose start, clamped into [0, E], is at or before e (N, past
// the last segment, and -1, before the first, give zeros). A warp takes a
// contiguous run of tiles (one wave of warps) and carries the row of the
// position before each tile, so it searches indptr only where its run starts.
// In a tile it marks the rows that start there (one coalesced read of indptr
// per 32 rows), and a max-scan carries each row over the positions up to the
// next start. Nothing waits at a block barrier: the block-wide chunks this
// replaced waited at three a chunk, which cost narrow rows half their speed.
template <typename scalar_t, int V>
__global__ void __launch_bounds__(core::kThreadsPerBlock, 1)
    gather_csr_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ indptr,
                      scalar_t* __restrict__ out, CsrTiles g) {
  using Vec = core::Vector<scalar_t, V>;
  constexpr unsigned kWarp = 0xffffffffu;
  constexpr int U = kCsrUnroll<scalar_t, V>;
  __shared__ int64_t tile_rows[kWarpsPerBlock][32 * kCsrLanePositions];
  int64_t* rows = tile_rows[threadIdx.x / 32];  // of the tile's positions
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  const int64_t warp = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t positions = 32 * g.lane_positions;
  const auto start = [&](int64_t r) { return min(max(__ldg(indptr + r), int64_t{0}), g.E); };
  const int64_t first_tile = warp * g.count / warps;
  const int64_t last_tile = (warp + 1) * g.count / warps;
  int64_t row = -1;  // of the position before the tile
  for (int64_t tile = first_tile; tile < last_tile; ++tile) {
    const int64_t o = tile / g.per_slice;
    const int64_t e0 = (tile - o * g.per_slice) * positions;
    const int64_t end = min(e0 + positions, g.E);
    if (e0 == 0) {
      row = -1;
    } else if (tile == first_tile) {
      row = warp_last_at_or_before(start, g.N, e0 - 1);
    }
    for (int64_t q = lane; q < positions; q += 32) rows[q] = -1;
    __syncwarp();
    // Rows past `row` start at or after e0; of those starting at one position
    // (empty segments) the last one holds it.
    for (int64_t r = row + 1 + lane;; r += 32) {
      const int64_t s = r <= g.N ? start(r) : g.E;
      const bool in_tile = s >= e0 && s < end;
      const int64_t next = __shfl_down_sync(kWarp, s, 1);
      if (in_tile && (lane == 31 || next != s)) rows[s - e0] = r;
      __syncwarp();
      if (!__all_sync(kWarp, in_tile)) break;
    }
    for (int64_t q = lane; q < positions; q += 32) {  // warp-uniform trips
      int64_t held = rows[q];
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int64_t before = __shfl_up_sync(kWarp, held, d);
        if (lane >= d) held = max(held, before);
      }
      rows[q] = held = max(held, row);
      row = __shfl_sync(kWarp, held, 31);
    }
    __syncwarp();
    row = rows[end - e0 - 1];

    const Vec* from = reinterpret_cast<const Vec*>(src) + o * g.N * g.vectors;
    Vec* to = reinterpret_cast<Vec*>(out) + (o * g.E + e0) * g.vectors;
    const int64_t items = (end - e0) * g.vectors;
    // The position and vector of the lane's item (32-bit: a row has fewer than 2^31 vectors).
    int q = lane / g.vectors, v = lane % g.vectors;
    for (int64_t i0 = 0; i0 < items; i0 += 32 * U) {
      Vec value[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (i0 + u * 32 + lane < items) {
          const int64_t r = rows[q];
          if (r >= 0 && r < g.N) {
            value[u] = from[r * g.vectors + v];
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) value[u].val[j] = scalar_t(0);
          }
        }
        q += g.lane_step_positions;
        v += g.lane_step_vectors;
        if (v >= g.vectors) {
          v -= g.vectors;
          ++q;
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t i = i0 + u * 32 + lane;
        if (i < items) to[i] = value[u];
      }
    }
    __syncwarp();  // rows are the next tile's
  }
}

inline CsrTiles csr_tiles(const GatherProblem& g, int64_t vectors, int unroll) {
  TORCH_CHECK(vectors <= std::numeric_limits<int32_t>::max() - 32, "torchplug::gather_csr: a row of ", vectors,
              " vectors is past the CUDA kernel's 2^31 - 33");
  CsrTiles t{};
  t.E = g.E;
  t.N = g.N;
  t.vectors = vectors;
  // Enough positions that a lane has `unroll` vectors to copy a tile.
  t.lane_positions = std::min<int64_t>(kCsrLanePositions, at::ceil_div<int64_t>(unroll, vectors));
  t.per_slice = at::ceil_div<int64_t>(g.E, 32 * t.lane_positions);
  t.count = g.outer * t.per_slice;
  t.lane_step_positions = static_cast<int>(32 / vectors);
  t.lane_step_vectors = static_cast<int>(32 % vectors);
  return t;
}

template <typename index_t>
GatherShape<index_t> gather_shape(const GatherProblem& g, int64_t vectors) {
  return {static_cast<index_t>(g.outer), static_cast<index_t>(g.E), static_cast<index_t>(vectors),
          static_cast<index_t>(g.outer * g.E * vectors), g.N};
}

inline void launch_gather(const GatherProblem& g) {
  if (g.out.numel() == 0) return;
  AT_DISPATCH_V2(g.src.scalar_type(), "torchplug::gather", AT_WRAP([&] {
    const auto* src = g.src.const_data_ptr<scalar_t>();
    auto* out = g.out.mutable_data_ptr<scalar_t>();
    core::with_vector_width<scalar_t>(g.inner, {src, out}, [&](auto w) {
      constexpr int V = decltype(w)::value;
      const int64_t vectors = g.inner / V;
      if (g.indptr.defined()) {
        const CsrTiles tiles = csr_tiles(g, vectors, kCsrUnroll<scalar_t, V>);
        core::launch_one_wave(gather_csr_kernel<scalar_t, V>, tiles.count * 32, src,
                              g.indptr.const_data_ptr<int64_t>(), out, tiles);
        return;
      }
      const int64_t threads = at::ceil_div<int64_t>(g.outer * g.E * vectors, kGatherUnroll);
      const auto run = [&](auto shape) {
        using index_t = decltype(shape.items);
        core::launch(gather_coo_kernel<scalar_t, V, index_t>, threads, src, g.index.const_data_ptr<int64_t>(),
                     out, shape, g.index_per_outer);
      };
      if (g.outer * g.E * vectors <= std::numeric_limits<int32_t>::max()) {
        run(gather_shape<uint32_t>(g, vectors));
      } else {
        run(gather_shape<int64_t>(g, vectors));
      }
    });
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
}

}  // namespace torchplug::scatter_detail
