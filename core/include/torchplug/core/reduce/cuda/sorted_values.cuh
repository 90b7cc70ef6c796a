#pragma once

// Deterministic mode's schedule for one value per source (a 1-D src, or
// any src flattened with an index of its shape) and a reduction without an
// arg (sum, mean, mul): a stable radix
// sort of the values themselves by row, then the segments over the sorted
// values, each row contiguous and in source order. The stable permutation of
// the ordered segments (index_plan.cuh) would leave the segment kernel one
// scattered 4-byte load per source through the permutation, and its row
// counts cost an atomic per source; here the sort carries the value where it
// carried the position, and the row offsets come from the sorted keys.
// A sorted index (all values inside [0, N)) is found by the probe and the
// counting pass first and reduces in place: no sort.
// Results are bitwise those of the ordered segments: the same rows in the
// same order, the same hub blocks.

#include "torchplug/core/reduce/cuda/segments.cuh"
#include "torchplug/core/reduce/index_plan.cuh"
#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/scratch.cuh"

#include <ATen/cuda/cub.h>
#include <ATen/ops/zeros.h>

#include <cstdint>
#include <limits>

namespace torchplug::core {

// rowptr[r] = the first position of sorted_keys holding r or more, for r in
// [0, N]: one binary search per row, so that a run of empty rows costs no
// thread more than the others.
template <typename offset_t>
__global__ void row_steps_kernel(const int32_t* __restrict__ sorted_keys, int64_t E, int64_t N,
                                 offset_t* __restrict__ rowptr) {
  TORCHPLUG_GRID_STRIDE_LOOP(r, N + 1) {
    int64_t low = 0, high = E;
    while (low < high) {
      const int64_t mid = (low + high) / 2;
      if (sorted_keys[mid] < r) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    rowptr[r] = static_cast<offset_t>(low);
  }
}

// Whether p takes the sorted values: one value per source, in a floating
// type (deterministic mode), a reduction without an arg, and sizes cub's
// int32 keys take.
template <typename Policy>
bool takes_sorted_values(const ScatterProblem& p) {
  return !Policy::kHasArg && p.index_1d && p.outer == 1 && p.inner == 1 &&
         p.E <= std::numeric_limits<int32_t>::max() && p.N < std::numeric_limits<int32_t>::max();
}

template <typename Policy, typename scalar_t>
void sorted_values_reduce(const ScatterProblem& p) {
  using offset_t = int32_t;
  const int64_t E = p.E, N = p.N;
  const auto* index = p.index.const_data_ptr<int64_t>();
  PlanOptions options;
  options.permutation = Permutation::kNone;
  options.probe = true;
  options.counters = segment_counters(E);
  const IndexPlan<offset_t> plan = plan_index<offset_t>(p.index, E, N, options);
  const ArgPositions positions{1, 0, E};
  if (plan.stats.narrow(0, N + 1, 1).item<offset_t>() == 0) {
    reduce_planned<Policy, scalar_t>(p, plan, index, false, positions);
    return;
  }
  const auto ints = p.index.options().dtype(at::kInt);
  const at::Tensor keys = scratch({E}, ints), sorted_keys = scratch({E}, ints);
  launch(sort_keys_kernel<int32_t, offset_t>, E, index, E, N, keys.mutable_data_ptr<int32_t>(),
         static_cast<offset_t*>(nullptr));
  ScatterProblem sorted = p;
  sorted.src = scratch({E}, p.src.options());
  const int end_bit = 64 - __builtin_clzll(static_cast<unsigned long long>(N) | 1ull);
  at::cuda::cub::radix_sort_pairs(keys.const_data_ptr<int32_t>(), sorted_keys.mutable_data_ptr<int32_t>(),
                                  p.src.const_data_ptr<scalar_t>(), sorted.src.mutable_data_ptr<scalar_t>(), E,
                                  /*descending=*/false, /*begin_bit=*/0, end_bit);
  // The sorted values as a caller's CSR: rows in order, values outside
  // [0, N) (key N) past rowptr[N]; the flag and counters start at 0.
  IndexPlan<offset_t> by_row;
  by_row.N = N;
  by_row.rowptr = scratch({N + 1}, ints);
  launch(row_steps_kernel<offset_t>, N + 1, sorted_keys.const_data_ptr<int32_t>(), E, N,
         by_row.rowptr.mutable_data_ptr<offset_t>());
  by_row.stats = at::zeros({N + 2 + options.counters}, ints);
  reduce_planned<Policy, scalar_t>(sorted, by_row, nullptr, false, positions);
}

}  // namespace torchplug::core
