#pragma once

// spmm on CUDA, for one reduction policy: one thread per (row, column
// vector of up to 16 bytes, inside one head) walks the row's edges in order,
// four or eight in flight (col, value and the x vector they name), combines
// the weighted messages in registers and writes the row once: no atomics, no
// zero fill, and the x rows the edges name are read as whole vectors by
// consecutive threads.
// Rows too long for one thread (a power-law graph's hubs) go to the hub
// index and are split as every reduction's hubs are (core/reduce/cuda/hub_rows.cuh). Edges
// whose col lies outside [0, N) are skipped; rowptr is clamped into [0, nnz].
// Each reduction compiles in a translation unit of its own (cuda/<reduction>.cu).

#include "torchplug/core/reduce/cuda/hub_rows.cuh"
#include "torchplug/core/reduce/cuda/segments.cuh"
#include "spmm_kernel.h"
#include "torchplug/core/reduce/index_plan.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <limits>

namespace torchplug::spmm_detail {
namespace {

// x [N, H, C] with F = H * C; value [nnz, H] (H = 1: a weight per edge).
struct Sizes {
  int64_t M, N, nnz, F, H, C;
};

// The weights of the head holding column `offset` (a vector never straddles
// two heads: its width divides C), read at stride H.
template <typename scalar_t>
__device__ __forceinline__ const scalar_t* head_weights(const scalar_t* value, int64_t offset, const Sizes& s) {
  return value == nullptr ? nullptr : value + offset / s.C;
}

__device__ __forceinline__ void row_bounds(const int64_t* __restrict__ rowptr, int64_t row, int64_t nnz,
                                           int64_t& start, int64_t& end) {
  start = min(max(rowptr[row], int64_t{0}), nnz);
  end = min(max(rowptr[row + 1], start), nnz);
}

// A row's (or a partial's) accumulators before its first edge: the policy's
// identity, held by `position`.
template <typename Policy, typename acc_t, int V>
__device__ __forceinline__ void start_accumulators(acc_t (&acc)[V], int64_t (&held)[V], int64_t position) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    acc[j] = Policy::template identity<acc_t>();
    held[j] = position;
  }
}

// Combines the messages of edges k .. k + count - 1 (count <= U, all loads
// in flight) into acc; held[j] follows acc[j] for min and max (kInOrder:
// edges come in increasing k, so the first to win holds the result).
template <typename Policy, bool kInOrder, int U, bool kWeighted, typename scalar_t, int V>
__device__ __forceinline__ void add_edges(at::opmath_type<scalar_t> (&acc)[V], int64_t (&held)[V],
                                          const int64_t* __restrict__ col, const scalar_t* __restrict__ value,
                                          const scalar_t* __restrict__ x, int64_t k, int64_t count,
                                          const Sizes& s, int64_t offset) {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t c[U];
  acc_t weight[U], message[U][V];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    c[u] = u < count ? col[k + u] : -1;
    weight[u] = kWeighted && u < count ? static_cast<acc_t>(value[(k + u) * s.H]) : acc_t(1);
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
      core::combine_at<Policy, kInOrder>(acc[j], held[j], weight[u] * message[u][j], k + u);
    }
  }
}

// Edges in flight per thread: a thread's vector is 16 bytes whatever the
// dtype, and with 2-byte values 8 edges at a time measured 8% faster than 4
// (float32: 4; 8 measured 17% slower, from the registers they hold).
template <typename scalar_t>
inline constexpr int kEdgesInFlight = sizeof(scalar_t) == 2 ? 8 : 4;

// Combines edges k .. end - 1, kEdgesInFlight at a time, the last batch
// masked: a row waits out ceil(degree / U) memory latencies, where a tail
// taken one edge at a time waited up to U - 1 more.
template <typename Policy, bool kInOrder, bool kWeighted, typename scalar_t, int V>
__device__ __forceinline__ void add_edge_range(at::opmath_type<scalar_t> (&acc)[V], int64_t (&held)[V],
                                               const int64_t* __restrict__ col, const scalar_t* __restrict__ value,
                                               const scalar_t* __restrict__ x, int64_t k, int64_t end,
                                               const Sizes& s, int64_t offset) {
  constexpr int U = kEdgesInFlight<scalar_t>;
  for (; k + U <= end; k += U) add_edges<Policy, kInOrder, U, kWeighted>(acc, held, col, value, x, k, U, s, offset);
  if (k < end) add_edges<Policy, kInOrder, U, kWeighted>(acc, held, col, value, x, k, end - k, s, offset);
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
                                 core::HubBlocks hubs, core::HubIndex<int64_t> hub_index) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t vectors = s.F / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, s.M * vectors) {
    const int64_t row = t / vectors;
    const int64_t offset = (t - row * vectors) * V;
    int64_t start, end;
    row_bounds(rowptr, row, s.nnz, start, end);
    if (hubs.is_hub(start, end)) {
      hub_index.add(hubs, row, start, end, offset / V, vectors);
      continue;
    }
    acc_t acc[V];
    int64_t held[V];
    // In order: the first edge holds an identity nothing beats.
    start_accumulators<Policy>(acc, held, start);
    add_edge_range<Policy, true, kWeighted>(acc, held, col, head_weights(value, offset, s), x, start, end, s,
                                            offset);
    write_row<Policy, scalar_t, V>(out, arg, row * s.F + offset, acc, held, end - start, s.nnz);
  }
}

// The hubs' partials: [hubs.partials()][F] accumulators (outer index 0),
// and for min and max the edge holding each.
template <typename acc_t>
using Partials = core::HubPartials<acc_t, int64_t>;

template <typename Policy, typename scalar_t, int V, bool kWeighted>
__global__ void spmm_hub_partials_kernel(const int64_t* __restrict__ col,
                                         const scalar_t* __restrict__ value, const scalar_t* __restrict__ x,
                                         Partials<at::opmath_type<scalar_t>> partials, Sizes s,
                                         core::HubIndex<int64_t> hub_index) {
  using acc_t = at::opmath_type<scalar_t>;
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if (hub_index.none()) return;
  const int64_t vectors = s.F / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, partials.hubs.blocks * vectors) {
    const int64_t block = t / vectors;
    const int64_t offset = (t - block * vectors) * V;
    partials.hubs.for_each_run(core::HubLevel::kBlock, block, s.nnz, hub_index,
                               [&](int64_t from, int64_t to, int64_t partial) {
      acc_t acc[V];
      int64_t held[V];
      partials.template start<Policy>(acc, held);
      add_edge_range<Policy, false, kWeighted>(acc, held, col, head_weights(value, offset, s), x, from, to, s,
                                               offset);
      partials.template store<Policy>(0, partial, s.F, offset, acc, held);
    });
  }
}

template <typename Policy, typename scalar_t, int V>
__global__ void spmm_hub_groups_kernel(Partials<at::opmath_type<scalar_t>> partials, Sizes s,
                                       core::HubIndex<int64_t> hub_index) {
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if (hub_index.none()) return;
  const int64_t vectors = s.F / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, partials.hubs.groups * vectors) {
    const int64_t group = t / vectors;
    const int64_t offset = (t - group * vectors) * V;
    partials.hubs.for_each_run(core::HubLevel::kGroup, group, s.nnz, hub_index,
                               [&](int64_t from, int64_t to, int64_t partial) {
      partials.template merge_group<Policy, V>(0, from, to, partial, s.F, offset);
    });
  }
}

template <typename Policy, typename scalar_t, int V>
__global__ void spmm_store_hubs_kernel(const int64_t* __restrict__ rowptr,
                                       Partials<at::opmath_type<scalar_t>> partials, scalar_t* __restrict__ out,
                                       int64_t* __restrict__ arg, Sizes s, core::HubIndex<int64_t> hub_index) {
  using acc_t = at::opmath_type<scalar_t>;
  core::wait_for_previous_kernel();
  if (hub_index.none()) return;
  const int64_t vectors = s.F / V;
  hub_index.for_each_hub_item(1, s.M, vectors, [&](int64_t, int64_t row, int64_t v) {
    const int64_t offset = v * V;
    int64_t start, end;
    row_bounds(rowptr, row, s.nnz, start, end);
    if (!partials.hubs.is_hub(start, end)) return;
    acc_t acc[V];
    int64_t held[V];
    start_accumulators<Policy>(acc, held, std::numeric_limits<int64_t>::max());
    partials.template merge_hub<Policy>(0, start, end, s.F, offset, acc, held);
    write_row<Policy, scalar_t, V>(out, arg, row * s.F + offset, acc, held, end - start, s.nnz);
  });
}

template <typename Policy, typename scalar_t, bool kWeighted>
void launch_spmm(const SpmmProblem& p) {
  const auto* x = p.x.const_data_ptr<scalar_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  const scalar_t* value = kWeighted ? p.value.const_data_ptr<scalar_t>() : nullptr;
  int64_t* arg = Policy::kHasArg ? p.arg.mutable_data_ptr<int64_t>() : nullptr;
  const Sizes s{p.M, p.N, p.nnz, p.F, p.H, p.C};
  core::with_vector_width<scalar_t>(p.C, {x, out}, [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t items = p.M * (p.F / V);
    const core::HubBlocks hubs = core::HubBlocks::of(p.nnz, items, p.nnz * (p.F / V));
    const auto* rowptr = p.rowptr.const_data_ptr<int64_t>();
    const bool has_hubs = p.nnz > hubs.limit;
    const int64_t hub_rows = has_hubs ? core::HubIndex<int64_t>::capacity_for(p.nnz, hubs) : 0;
    // The hub index's count and its blocks' cover, zeroed (core/reduce/cuda/hub_rows.cuh).
    const at::Tensor hub_counters = at::zeros({has_hubs ? 1 + 2 * hubs.blocks : 1}, p.rowptr.options());
    const at::Tensor listed = core::scratch({hub_rows}, p.rowptr.options());
    const auto hub_index = core::HubIndex<int64_t>::in(hub_counters.mutable_data_ptr<int64_t>(), listed);
    core::launch(spmm_rows_kernel<Policy, scalar_t, V, kWeighted>, items, rowptr, p.col.const_data_ptr<int64_t>(),
                 value, x, out, arg, s, hubs, hub_index);
    if (!has_hubs) return;
    using acc_t = at::opmath_type<scalar_t>;
    // Filled, so that a malformed rowptr (outside checked mode) whose hub
    // misses a block's or a group's partial reads the identity, not stale
    // memory.
    const at::Tensor values = at::full({hubs.partials() * p.F}, Policy::template identity<acc_t>(),
                                       p.x.options().dtype(at::toOpMathType(p.x.scalar_type())));
    const at::Tensor helds = at::full({Policy::kHasArg ? hubs.partials() * p.F : 0},
                                      std::numeric_limits<int64_t>::max(), p.rowptr.options());
    const Partials<acc_t> partials{values.mutable_data_ptr<acc_t>(), helds.mutable_data_ptr<int64_t>(), hubs};
    core::launch_one_wave_chained(spmm_hub_partials_kernel<Policy, scalar_t, V, kWeighted>, hubs.blocks * (p.F / V),
                                  p.col.const_data_ptr<int64_t>(), value, x, partials, s, hub_index);
    if (hubs.groups > 1) {
      core::launch_one_wave_chained(spmm_hub_groups_kernel<Policy, scalar_t, V>, hubs.groups * (p.F / V), partials,
                                    s, hub_index);
    }
    core::launch_one_wave_chained(spmm_store_hubs_kernel<Policy, scalar_t, V>, hub_rows * (p.F / V), rowptr,
                                  partials, out, arg, s, hub_index);
  });
}

}  // namespace

template <typename Policy>
void spmm_kernel_cuda(const SpmmProblem& p) {
  if (p.out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.x.scalar_type(), "torchplug::spmm", [&] {
    if (p.value.defined()) {
      launch_spmm<Policy, scalar_t, true>(p);
    } else {
      launch_spmm<Policy, scalar_t, false>(p);
    }
  });
}

}  // namespace torchplug::spmm_detail
