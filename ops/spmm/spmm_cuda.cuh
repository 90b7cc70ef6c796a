#pragma once

// spmm on CUDA, for one reduction policy: one thread per (row, column
// vector of up to 16 bytes) walks the row's edges in order, four in flight
// (col, value and the x vector they name), combines the weighted messages in
// registers and writes the row once: no atomics, no zero fill, and the x
// rows the edges name are read as whole vectors by consecutive threads.
// Rows with more than kLongRow edges (a power-law graph's hubs) would keep
// one thread busy for all of them: they are flagged and left to one block
// each, whose threads take strided edges and merge in a fixed tree. Edges
// whose col lies outside [0, N) are skipped; rowptr is clamped into [0, nnz].
// Each reduction compiles in a translation unit of its own (CMakeLists.txt).

#include "../scatter/cuda/segments.cuh"
#include "spmm_kernel.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/zeros.h>

#include <limits>

namespace torchplug::spmm_detail {
namespace {

constexpr int64_t kLongRow = 1024;
constexpr int kEdgesInFlight = 4;

struct Sizes {
  int64_t M, N, nnz, F;
};

__device__ __forceinline__ void row_bounds(const int64_t* __restrict__ rowptr, int64_t row, int64_t nnz,
                                           int64_t& start, int64_t& end) {
  start = min(max(rowptr[row], int64_t{0}), nnz);
  end = min(max(rowptr[row + 1], start), nnz);
}

// Combines the messages of edges k .. k + U - 1 (all loads in flight) into
// acc; held[j] follows acc[j] for min and max (kInOrder: edges come in
// increasing k, so the first to win holds the result).
template <typename Policy, bool kInOrder, int U, bool kWeighted, typename scalar_t, int V>
__device__ __forceinline__ void add_edges(at::opmath_type<scalar_t> (&acc)[V], int64_t (&held)[V],
                                          const int64_t* __restrict__ col, const scalar_t* __restrict__ value,
                                          const scalar_t* __restrict__ x, int64_t k, int64_t stride,
                                          const Sizes& s, int64_t offset) {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t c[U];
  acc_t weight[U], message[U][V];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    c[u] = col[k + u * stride];
    weight[u] = kWeighted ? static_cast<acc_t>(value[k + u * stride]) : acc_t(1);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (c[u] >= 0 && c[u] < s.N) core::load_as<scalar_t, V>(x + c[u] * s.F + offset, message[u]);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (c[u] < 0 || c[u] >= s.N) continue;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      scatter_detail::combine_at<Policy, kInOrder>(acc[j], held[j], weight[u] * message[u][j], k + u * stride);
    }
  }
}

template <typename Policy, typename scalar_t, int V>
__device__ __forceinline__ void write_row(scalar_t* __restrict__ out, int64_t* __restrict__ arg, int64_t at,
                                          const at::opmath_type<scalar_t> (&acc)[V], const int64_t (&held)[V],
                                          int64_t count, int64_t nnz) {
  core::Vector<scalar_t, V> result;
#pragma unroll
  for (int j = 0; j < V; ++j) result.val[j] = static_cast<scalar_t>(core::finish<Policy>(acc[j], count, false));
  *reinterpret_cast<core::Vector<scalar_t, V>*>(out + at) = result;
  if constexpr (Policy::kHasArg) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      arg[at + j] = count == 0 || held[j] == std::numeric_limits<int64_t>::max() ? nnz : held[j];
    }
  }
}

template <typename Policy, typename scalar_t, int V, bool kWeighted>
__global__ void spmm_rows_kernel(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                                 const scalar_t* __restrict__ value, const scalar_t* __restrict__ x,
                                 scalar_t* __restrict__ out, int64_t* __restrict__ arg, Sizes s,
                                 int32_t* __restrict__ long_rows) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t vectors = s.F / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, s.M * vectors) {
    const int64_t row = t / vectors;
    const int64_t offset = (t - row * vectors) * V;
    int64_t start, end;
    row_bounds(rowptr, row, s.nnz, start, end);
    if (end - start > kLongRow) {
      *long_rows = 1;
      continue;
    }
    acc_t acc[V];
    int64_t held[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      acc[j] = Policy::template identity<acc_t>();
      held[j] = start;  // in order: the first edge holds an identity nothing beats
    }
    int64_t k = start;
    for (; k + kEdgesInFlight <= end; k += kEdgesInFlight) {
      add_edges<Policy, true, kEdgesInFlight, kWeighted, scalar_t, V>(acc, held, col, value, x, k, 1, s, offset);
    }
    for (; k < end; ++k) add_edges<Policy, true, 1, kWeighted, scalar_t, V>(acc, held, col, value, x, k, 1, s, offset);
    write_row<Policy, scalar_t, V>(out, arg, row * s.F + offset, acc, held, end - start, s.nnz);
  }
}

// One block per (long row, column vector): thread i takes edges start + i,
// start + i + blockDim.x, ...; the block merges its threads' accumulators
// pairwise, halving the stride (min and max keep the smallest edge holding
// the result).
template <typename Policy, typename scalar_t, int V, bool kWeighted>
__global__ void spmm_long_rows_kernel(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                                      const scalar_t* __restrict__ value, const scalar_t* __restrict__ x,
                                      scalar_t* __restrict__ out, int64_t* __restrict__ arg, Sizes s,
                                      const int32_t* __restrict__ long_rows) {
  using acc_t = at::opmath_type<scalar_t>;
  __shared__ acc_t merged[core::kThreadsPerBlock][V];
  __shared__ int64_t merged_held[Policy::kHasArg ? core::kThreadsPerBlock : 1][V];
  if (*long_rows == 0) return;
  const int64_t vectors = s.F / V;
  for (int64_t t = blockIdx.x; t < s.M * vectors; t += gridDim.x) {
    const int64_t row = t / vectors;
    const int64_t offset = (t - row * vectors) * V;
    int64_t start, end;
    row_bounds(rowptr, row, s.nnz, start, end);
    if (end - start <= kLongRow) continue;
    acc_t acc[V];
    int64_t held[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      acc[j] = Policy::template identity<acc_t>();
      held[j] = std::numeric_limits<int64_t>::max();
    }
    for (int64_t k = start + threadIdx.x; k < end; k += blockDim.x) {
      add_edges<Policy, false, 1, kWeighted, scalar_t, V>(acc, held, col, value, x, k, 1, s, offset);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      merged[threadIdx.x][j] = acc[j];
      if constexpr (Policy::kHasArg) merged_held[threadIdx.x][j] = held[j];
    }
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (threadIdx.x < stride) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          int64_t position = 0, other = 0;
          if constexpr (Policy::kHasArg) {
            position = merged_held[threadIdx.x][j];
            other = merged_held[threadIdx.x + stride][j];
          }
          scatter_detail::combine_at<Policy, false>(merged[threadIdx.x][j], position,
                                                    merged[threadIdx.x + stride][j], other);
          if constexpr (Policy::kHasArg) merged_held[threadIdx.x][j] = position;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        acc[j] = merged[0][j];
        held[j] = Policy::kHasArg ? merged_held[0][j] : 0;
      }
      write_row<Policy, scalar_t, V>(out, arg, row * s.F + offset, acc, held, end - start, s.nnz);
    }
    __syncthreads();
  }
}

template <typename Policy, typename scalar_t, bool kWeighted>
void launch_spmm(const SpmmProblem& p) {
  const auto* x = p.x.const_data_ptr<scalar_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  const scalar_t* value = kWeighted ? p.value.const_data_ptr<scalar_t>() : nullptr;
  int64_t* arg = Policy::kHasArg ? p.arg.mutable_data_ptr<int64_t>() : nullptr;
  const at::Tensor flag = at::zeros({1}, p.rowptr.options().dtype(at::kInt));
  const Sizes s{p.M, p.N, p.nnz, p.F};
  core::with_vector_width<scalar_t>(p.F, {x, out}, [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t items = p.M * (p.F / V);
    core::launch(spmm_rows_kernel<Policy, scalar_t, V, kWeighted>, items, p.rowptr.const_data_ptr<int64_t>(),
                 p.col.const_data_ptr<int64_t>(), value, x, out, arg, s, flag.mutable_data_ptr<int32_t>());
    if (p.nnz > kLongRow) {
      core::launch_one_wave(spmm_long_rows_kernel<Policy, scalar_t, V, kWeighted>, items * core::kThreadsPerBlock,
                            p.rowptr.const_data_ptr<int64_t>(), p.col.const_data_ptr<int64_t>(), value, x, out,
                            arg, s, flag.const_data_ptr<int32_t>());
    }
  });
}

}  // namespace

template <typename Policy>
void spmm_kernel_cuda(const SpmmProblem& p) {
  if (p.out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.x.scalar_type(), kOpName<Policy>, [&] {
    if (p.value.defined()) {
      launch_spmm<Policy, scalar_t, true>(p);
    } else {
      launch_spmm<Policy, scalar_t, false>(p);
    }
  });
}

}  // namespace torchplug::spmm_detail
