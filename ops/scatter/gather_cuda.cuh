#pragma once

// The gather kernels of gather_coo, gather_csr and scatter's backward: each
// output row is one source row (or zeros for a row outside [0, N)), copied in
// vectors of V values. A thread copies kGatherUnroll vectors a block apart
// with all of their loads in flight: one vector per thread left the gather
// latency-bound, memory idle part of the time. gather_coo
// reads each position's row from its index; gather_csr finds it from the
// indptr per chunk of positions, with no E-long rows tensor.

#include "scatter_kernel.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Dispatch_v2.h>
#include <ATen/ceil_div.h>

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
// before end), item u from row rows(u, position) of its slice.
template <typename scalar_t, int V, typename index_t, typename Rows>
__device__ __forceinline__ void copy_items(const scalar_t* __restrict__ src, scalar_t* __restrict__ out,
                                           const GatherShape<index_t>& shape, index_t begin, index_t end,
                                           Rows rows) {
  using Vec = core::Vector<scalar_t, V>;
  Vec value[kGatherUnroll];
#pragma unroll
  for (int u = 0; u < kGatherUnroll; ++u) {
    const index_t t = begin + u * blockDim.x + threadIdx.x;
    if (t >= end) break;
    const index_t oe = shape.position(t);
    const int64_t row = rows(u, oe);
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
    copy_items<scalar_t, V>(src, out, shape, begin, end, [&](int u, index_t) { return rows[u]; });
  }
}

// The last r in [low, high] with bound(r) <= e, or low - 1 when there is none.
template <typename Bound>
__device__ __forceinline__ int64_t last_at_or_before(Bound bound, int64_t low, int64_t high, int64_t e) {
  while (low <= high) {
    const int64_t mid = low + (high - low) / 2;
    if (bound(mid) <= e) {
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  return high;
}

// gather_csr with one indptr [N + 1] for every slice: position e takes the
// last row r <= N whose start, clamped into [0, E], is at or before e (N, past
// the last segment, and -1, before the first, give zeros). A block takes a
// contiguous run of chunks (one wave of blocks), so that each chunk starts
// from the row its predecessor ended on: one binary search over indptr per
// block, not per chunk (per chunk, its latency held the kernel far below DRAM
// bandwidth). Per chunk, a window of indptr from that row goes to shared
// memory (one entry per position of the chunk and one more: enough unless
// segments are empty) and each position searches it, the rest of indptr when
// past it.
template <typename scalar_t, int V, typename index_t>
__global__ void gather_csr_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ indptr,
                                  scalar_t* __restrict__ out, GatherShape<index_t> shape) {
  __shared__ int64_t window[kGatherChunk + 1];
  __shared__ int64_t rows[kGatherChunk];  // of the chunk's positions (at most one per item)
  __shared__ int64_t first_row;
  const int64_t N = shape.N;
  const auto start = [&](int64_t r) { return min(max(__ldg(indptr + r), int64_t{0}), int64_t{shape.E}); };
  const int64_t chunks = at::ceil_div<int64_t>(shape.items, kGatherChunk);
  const int64_t per_block = at::ceil_div<int64_t>(chunks, gridDim.x);
  const int64_t last_chunk = min((blockIdx.x + 1) * per_block, chunks);
  int64_t row = -2;  // the row of the previous chunk's last position; -2: none yet
  for (int64_t chunk = blockIdx.x * per_block; chunk < last_chunk; ++chunk) {
    const index_t begin = chunk * kGatherChunk;
    const index_t end = min(begin + kGatherChunk, shape.items);
    const index_t first = shape.position(begin);
    const index_t count = shape.position(end - 1) - first + 1;
    const index_t o = shape.slice(first);
    const int64_t e0 = first - o * shape.E;
    const bool one_slice = shape.slice(first + count - 1) == o;
    if (one_slice && (row == -2 || shape.slice(first - 1) != o)) {  // no row to start from
      if (threadIdx.x == 0) first_row = last_at_or_before(start, 0, N, e0);
      __syncthreads();
      row = first_row;
    }
    if (one_slice) {
      const int64_t base = max(row, int64_t{0});
      const int64_t loaded = min(static_cast<int64_t>(count) + 1, N + 1 - base);
      for (int64_t i = threadIdx.x; i < loaded; i += blockDim.x) window[i] = start(base + i);
      __syncthreads();
      const auto in_window = [&](int64_t i) { return window[i]; };
      for (int64_t p = threadIdx.x; p < count; p += blockDim.x) {
        const int64_t r = last_at_or_before(in_window, 0, loaded - 1, e0 + p);
        const bool past = r == loaded - 1 && base + r < N;
        rows[p] = past ? last_at_or_before(start, base + r, N, e0 + p) : r < 0 ? -1 : base + r;
      }
    } else {  // the chunk spans slices
      for (int64_t p = threadIdx.x; p < count; p += blockDim.x) {
        const index_t oe = first + p;
        rows[p] = last_at_or_before(start, 0, N, oe - shape.slice(oe) * shape.E);
      }
    }
    __syncthreads();
    copy_items<scalar_t, V>(src, out, shape, begin, end, [&](int, index_t oe) { return rows[oe - first]; });
    row = rows[count - 1];
    __syncthreads();  // the window and rows are the next chunk's
  }
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
      const int64_t threads = at::ceil_div<int64_t>(g.outer * g.E * vectors, kGatherUnroll);
      const auto run = [&](auto shape) {
        using index_t = decltype(shape.items);
        if (g.indptr.defined()) {
          core::launch_one_wave(gather_csr_kernel<scalar_t, V, index_t>, threads, src,
                                g.indptr.const_data_ptr<int64_t>(), out, shape);
        } else {
          core::launch(gather_coo_kernel<scalar_t, V, index_t>, threads, src,
                       g.index.const_data_ptr<int64_t>(), out, shape, g.index_per_outer);
        }
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
