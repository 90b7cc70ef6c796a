#pragma once

// The composites on CUDA: a row program (core/row_program.h) over the index
// plan's CSR (core/index_plan.cuh), as the segment kernels of the scatter
// family walk it (ops/scatter/cuda/segments.cuh):
//   row_states_kernel  one thread per (outer, row, column vector) updates V
//                      states over the row's sources (through the permutation
//                      for an unsorted index), then writes the row's result
//                      (reducing programs) or its prepared states (emitting
//                      ones). Hubs (core/reduce/cuda/hub_rows.cuh) are
//                      flagged and left to
//   hub_partials_kernel  one thread per (outer, block of the sorted order,
//                      column vector) updates states over each hub's
//                      sources in the block,
//   hub_groups_kernel  one thread per (outer, group of blocks, column
//                      vector) merges each hub's block states in the
//                      group, and
//   store_hubs_kernel  merges each hub's group (or block) states in order.
//   emit_kernel        emitting programs: one thread per (outer, source,
//                      column vector) writes the source's values from its
//                      row's states, coalesced.
// No host synchronisation, no atomics on values. In deterministic mode the
// permutation is stable, so every row's sources go in source order and
// results repeat bit for bit. An index of src's shape is flattened first
// (one row per output element). Each program compiles in a translation unit
// of its own (CMakeLists.txt instantiates run_cuda<Program>).

#include "torchplug/core/reduce/cuda/segments.cuh"
#include "composite_kernel.h"
#include "torchplug/core/reduce/index_plan.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/where.h>

#include <limits>

namespace torchplug::composite_detail {
namespace {

using core::row_item;
using core::RowItem;

template <typename Program, typename offset_t>
struct Rows {
  core::Csr<offset_t> csr;
  typename Program::State* states;  // emitting programs: [outer, N, inner]
  typename Program::State* partials;  // the hubs': [outer, hubs.partials(), inner]
  int64_t E, inner, outer, N;
  int64_t items;  // outer * N * (inner / V)
  core::HubBlocks hubs;
  core::HubIndex<offset_t> hub_index;
  bool accumulate;
  offset_t* next_tile;
};

// The V values of source e of column vector v (0 for a missing second input).
template <typename scalar_t, int V>
__device__ __forceinline__ void load_source(const scalar_t* __restrict__ t, int64_t at,
                                            at::opmath_type<scalar_t> (&values)[V]) {
  if (t == nullptr) {
#pragma unroll
    for (int j = 0; j < V; ++j) values[j] = 0;
  } else {
    core::load_as<scalar_t, V>(t + at, values);
  }
}

// A row's states start from the program's, with out's values as a first
// source when reducing into out.
template <typename Program, typename scalar_t, int V>
__device__ __forceinline__ void start_states(const Program& program, typename Program::State (&s)[V],
                                             const scalar_t* target, bool accumulate) {
  using acc_t = at::opmath_type<scalar_t>;
#pragma unroll
  for (int j = 0; j < V; ++j) s[j] = program.init();
  if constexpr (!Program::kEmits) {
    if (accumulate) {
      acc_t before[V];
      core::load_as<scalar_t, V>(target, before);
#pragma unroll
      for (int j = 0; j < V; ++j) program.update(s[j], before[j], acc_t(0));
    }
  }
}

// Writes a row's states: its results (reducing) or prepared states (emitting).
template <typename Program, typename scalar_t, int V, typename offset_t>
__device__ __forceinline__ void finish_row(const Program& program, typename Program::State (&s)[V],
                                           const Rows<Program, offset_t>& r, int64_t at,
                                           scalar_t* __restrict__ out) {
  if constexpr (Program::kEmits) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      program.prepare(s[j]);
      r.states[at + j] = s[j];
    }
  } else {
    core::Vector<scalar_t, V> result;
#pragma unroll
    for (int j = 0; j < V; ++j) result.val[j] = static_cast<scalar_t>(program.result(s[j]));
    *reinterpret_cast<core::Vector<scalar_t, V>*>(out + at) = result;
  }
}

constexpr int kSourcesInFlight = 4;

template <typename Program, typename scalar_t, int V, typename offset_t, bool kPermuted>
__global__ void row_states_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                                  scalar_t* __restrict__ out, Program program, Rows<Program, offset_t> r) {
  using acc_t = at::opmath_type<scalar_t>;
  using State = typename Program::State;
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if ((*r.csr.unsorted != 0) != kPermuted) return;
  const int64_t vectors = r.inner / V;
  core::for_each_tile(r.items, r.next_tile, [&](int64_t t) {
    const RowItem item = row_item(t, vectors, r.outer, r.N);
    offset_t start, end;
    r.csr.bounds(item.row, kPermuted, start, end);
    if (r.hubs.is_hub(start, end)) {
      if (item.o == 0) r.hub_index.add(r.hubs, item.row, start, end, item.v, vectors);
      return;
    }
    const int64_t at = item.slot * r.inner + item.v * V;
    const int64_t column = item.o * r.E * r.inner + item.v * V;
    State s[V];
    start_states<Program, scalar_t, V>(program, s, out + at, r.accumulate);
    offset_t k = start;
    for (; static_cast<int64_t>(k) + kSourcesInFlight <= end; k += kSourcesInFlight) {
      acc_t a[kSourcesInFlight][V], b[kSourcesInFlight][V];
#pragma unroll
      for (int u = 0; u < kSourcesInFlight; ++u) {
        const int64_t e = kPermuted ? static_cast<int64_t>(r.csr.perm[k + u]) : static_cast<int64_t>(k + u);
        load_source<scalar_t, V>(x, column + e * r.inner, a[u]);
        load_source<scalar_t, V>(y, column + e * r.inner, b[u]);
      }
#pragma unroll
      for (int u = 0; u < kSourcesInFlight; ++u) {
#pragma unroll
        for (int j = 0; j < V; ++j) program.update(s[j], a[u][j], b[u][j]);
      }
    }
    for (; k < end; ++k) {
      const int64_t e = kPermuted ? static_cast<int64_t>(r.csr.perm[k]) : static_cast<int64_t>(k);
      acc_t a[V], b[V];
      load_source<scalar_t, V>(x, column + e * r.inner, a);
      load_source<scalar_t, V>(y, column + e * r.inner, b);
#pragma unroll
      for (int j = 0; j < V; ++j) program.update(s[j], a[j], b[j]);
    }
    finish_row<Program, scalar_t, V>(program, s, r, at, out);
  });
}

template <typename Program, typename scalar_t, int V, typename offset_t>
__global__ void hub_partials_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y, Program program,
                                    Rows<Program, offset_t> r) {
  using acc_t = at::opmath_type<scalar_t>;
  using State = typename Program::State;
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if (r.hub_index.none()) return;
  const bool permuted = *r.csr.unsorted != 0;
  const int64_t vectors = r.inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, r.outer * r.hubs.blocks * vectors) {
    const int64_t v = t % vectors;
    const int64_t block = t / vectors % r.hubs.blocks;
    const int64_t o = t / vectors / r.hubs.blocks;
    const int64_t column = o * r.E * r.inner + v * V;
    r.hubs.for_each_run(core::HubLevel::kBlock, block, r.E, r.hub_index,
                        [&](int64_t from, int64_t to, int64_t partial) {
      State s[V];
#pragma unroll
      for (int j = 0; j < V; ++j) s[j] = program.init();
      for (int64_t k = from; k < to; ++k) {
        const int64_t e = permuted ? static_cast<int64_t>(r.csr.perm[k]) : k;
        acc_t a[V], b[V];
        load_source<scalar_t, V>(x, column + e * r.inner, a);
        load_source<scalar_t, V>(y, column + e * r.inner, b);
#pragma unroll
        for (int j = 0; j < V; ++j) program.update(s[j], a[j], b[j]);
      }
      State* slot = r.partials + r.hubs.at(o, partial, r.inner) + v * V;
#pragma unroll
      for (int j = 0; j < V; ++j) slot[j] = s[j];
    });
  }
}

template <typename Program, int V, typename offset_t>
__global__ void hub_groups_kernel(Program program, Rows<Program, offset_t> r) {
  using State = typename Program::State;
  core::wait_for_previous_kernel();
  core::let_next_kernel_start();
  if (r.hub_index.none()) return;
  const int64_t vectors = r.inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, r.outer * r.hubs.groups * vectors) {
    const int64_t v = t % vectors;
    const int64_t group = t / vectors % r.hubs.groups;
    const int64_t o = t / vectors / r.hubs.groups;
    r.hubs.for_each_run(core::HubLevel::kGroup, group, r.E, r.hub_index,
                        [&](int64_t from, int64_t to, int64_t partial) {
      State s[V];
#pragma unroll
      for (int j = 0; j < V; ++j) s[j] = program.init();
      r.hubs.for_each_partial(core::HubLevel::kBlock, from, to, [&](int64_t block_partial) {
        const State* slot = r.partials + r.hubs.at(o, block_partial, r.inner) + v * V;
#pragma unroll
        for (int j = 0; j < V; ++j) program.merge(s[j], slot[j]);
      });
      State* slot = r.partials + r.hubs.at(o, partial, r.inner) + v * V;
#pragma unroll
      for (int j = 0; j < V; ++j) slot[j] = s[j];
    });
  }
}

template <typename Program, typename scalar_t, int V, typename offset_t>
__global__ void store_hubs_kernel(scalar_t* __restrict__ out, Program program, Rows<Program, offset_t> r) {
  using State = typename Program::State;
  core::wait_for_previous_kernel();
  if (r.hub_index.none()) return;
  const bool permuted = *r.csr.unsorted != 0;
  r.hub_index.for_each_hub_item(r.outer, r.N, r.inner / V, [&](int64_t o, int64_t row, int64_t v) {
    const RowItem item{o * r.N + row, o, row, v};
    offset_t start, end;
    r.csr.bounds(item.row, permuted, start, end);
    if (!r.hubs.is_hub(start, end)) return;
    const int64_t at = item.slot * r.inner + item.v * V;
    State s[V];
    start_states<Program, scalar_t, V>(program, s, out + at, r.accumulate);
    r.hubs.for_each_hub_partial(start, end, [&](int64_t partial) {
      const State* slot = r.partials + r.hubs.at(item.o, partial, r.inner) + item.v * V;
#pragma unroll
      for (int j = 0; j < V; ++j) program.merge(s[j], slot[j]);
    });
    finish_row<Program, scalar_t, V>(program, s, r, at, out);
  });
}

template <typename Program, typename scalar_t, int V>
__global__ void emit_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                            const int64_t* __restrict__ index, const typename Program::State* __restrict__ states,
                            scalar_t* __restrict__ out, Program program, int64_t outer, int64_t E,
                            int64_t inner, int64_t N, int64_t items) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t vectors = inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t source = t / vectors;  // o * E + e
    const int64_t v = t - source * vectors;
    const int64_t o = outer == 1 ? 0 : source / E;
    const int64_t row = index[source - o * E];
    const int64_t at = source * inner + v * V;
    acc_t a[V], b[V];
    load_source<scalar_t, V>(x, at, a);
    load_source<scalar_t, V>(y, at, b);
    core::Vector<scalar_t, V> result;
    if (row >= 0 && row < N) {
      const auto* s = states + (o * N + row) * inner + v * V;
#pragma unroll
      for (int j = 0; j < V; ++j) result.val[j] = static_cast<scalar_t>(program.emit(s[j], a[j], b[j]));
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) result.val[j] = static_cast<scalar_t>(program.none());
    }
    *reinterpret_cast<core::Vector<scalar_t, V>*>(out + at) = result;
  }
}

// An index of src's shape as one row per output element: src, y and out
// viewed flat, each element's row (o * N + index) * inner + f, or -1 where
// the index value lies outside [0, N).
RowsProblem flattened(const RowsProblem& r) {
  const ScatterProblem& p = r.p;
  RowsProblem flat = r;
  const auto opts = p.index.options();
  const auto rows = p.index.view({p.outer, p.E, p.inner});
  const auto inside = rows.ge(0).logical_and_(rows.lt(p.N));
  const auto base = at::arange(p.outer, opts).mul_(p.N).view({p.outer, 1, 1});
  const auto column = at::arange(p.inner, opts).view({1, 1, p.inner});
  flat.p.index = at::where(inside, (base + rows) * p.inner + column, -1).view({-1});
  flat.p.index_1d = true;
  flat.p.src = p.src.view({-1});
  if (r.y.defined()) flat.y = r.y.view({-1});
  flat.p.out = p.out.view({-1});
  flat.p.outer = 1;
  flat.p.E = p.src.numel();
  flat.p.inner = 1;
  flat.p.N = p.outer * p.N * p.inner;
  return flat;
}

template <typename Program, typename scalar_t, typename offset_t>
void run_planned(const RowsProblem& r, const Program& program) {
  using State = typename Program::State;
  const ScatterProblem& p = r.p;
  core::PlanOptions options;
  options.permutation = at::globalContext().deterministicAlgorithms() ? core::Permutation::kStable
                                                                       : core::Permutation::kAtomic;
  options.counters = 1 + core::hub_index_counters(p.E);  // tiles taken, then the hub index's
  const auto plan = core::plan_index<offset_t>(p.index, p.E, p.N, options);
  at::Tensor states;
  if constexpr (Program::kEmits) {
    states = at::empty({static_cast<int64_t>(p.outer * p.N * p.inner * sizeof(State))},
                       p.src.options().dtype(at::kByte));
  }
  const auto* x = p.src.const_data_ptr<scalar_t>();
  const scalar_t* y = Program::kInputs == 2 ? r.y.const_data_ptr<scalar_t>() : nullptr;
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  core::with_vector_width<scalar_t>(p.inner, {x, y, out}, [&](auto w) {
    constexpr int V = decltype(w)::value;
    const int64_t vectors = p.inner / V;
    const int64_t items = p.outer * p.N * vectors;
    const core::HubBlocks hubs = core::HubBlocks::of(p.E, items, p.outer * p.E * vectors);
    const int64_t partial_states = p.E > hubs.limit ? p.outer * hubs.partials() * p.inner : 0;
    const at::Tensor partials =
        at::empty({partial_states * static_cast<int64_t>(sizeof(State))}, p.src.options().dtype(at::kByte));
    const int64_t hub_rows = p.E > hubs.limit ? core::HubIndex<offset_t>::capacity_for(p.E, hubs) : 0;
    const at::Tensor listed = core::scratch({hub_rows}, plan.stats.options().dtype(at::kLong));
    const auto hub_index = core::HubIndex<offset_t>::in(plan.counter(1), listed);
    const Rows<Program, offset_t> rows{plan.csr(),
                                       Program::kEmits ? reinterpret_cast<State*>(states.mutable_data_ptr())
                                                       : nullptr,
                                       reinterpret_cast<State*>(partials.mutable_data_ptr()),
                                       p.E, p.inner, p.outer, p.N, items, hubs, hub_index, p.accumulate,
                                       plan.counter(0)};
    core::launch_one_wave_chained(row_states_kernel<Program, scalar_t, V, offset_t, false>, rows.items, x, y, out,
                                  program, rows);
    core::launch_one_wave_chained(row_states_kernel<Program, scalar_t, V, offset_t, true>, rows.items, x, y, out,
                                  program, rows);
    if (p.E > hubs.limit) {
      core::launch_one_wave_chained(hub_partials_kernel<Program, scalar_t, V, offset_t>,
                                    p.outer * hubs.blocks * vectors, x, y, program, rows);
      if (hubs.groups > 1) {
        core::launch_one_wave_chained(hub_groups_kernel<Program, V, offset_t>, p.outer * hubs.groups * vectors,
                                      program, rows);
      }
      core::launch_one_wave_chained(store_hubs_kernel<Program, scalar_t, V, offset_t>, p.outer * hub_rows * vectors,
                                    out, program, rows);
    }
    if constexpr (Program::kEmits) {
      const int64_t emitted = p.outer * p.E * vectors;
      core::launch(emit_kernel<Program, scalar_t, V>, emitted, x, y, p.index.const_data_ptr<int64_t>(),
                   rows.states, out, program, p.outer, p.E, p.inner, p.N, emitted);
    }
  });
}

}  // namespace

template <template <typename> class Program>
void run_cuda(const RowsProblem& r, bool option) {
  if (r.p.out.numel() == 0) return;
  const RowsProblem& q = r.p.index_1d ? r : flattened(r);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.p.src.scalar_type(), "torchplug::composite", [&] {
    const Program<at::opmath_type<scalar_t>> program{option};
    if (q.p.E <= std::numeric_limits<int32_t>::max()) {
      run_planned<decltype(program), scalar_t, int32_t>(q, program);
    } else {
      run_planned<decltype(program), scalar_t, int64_t>(q, program);
    }
  });
}

}  // namespace torchplug::composite_detail
