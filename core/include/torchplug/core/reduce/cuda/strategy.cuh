#pragma once

// The scatter family on CUDA, for one reduction policy: which strategy runs,
// the accumulator around the atomic ones, and the passes that finish a
// result. A family instantiates scatter_kernel_cuda<Policy> (and
// segment_csr_kernel_cuda) from here in a translation unit per reduction.
//
// Which strategy runs (index values outside [0, N) are skipped by every one):
//   deterministic mode (torch.use_deterministic_algorithms), floating types
//       -> inner == 1 over two or more outer slices into few slots
//       (takes_ordered_bins) -> ordered bins (cuda/ordered_bins.cuh): the
//       index's order built once per chunk, each chunk's values combined in
//       shared memory in order; else
//       -> ordered segments: a stable sort of the index (or, for an index
//       of src's shape, of the flat output slots) and the segment kernel, each
//       slot combining its sources in source order; one value per source
//       without an arg sorts the values themselves (cuda/sorted_values.cuh).
//   mul, min and max, where the ordered bins apply -> the ordered bins:
//       they combine in registers what shared bins would with a
//       compare-and-swap loop (mul), and in order each slot's first position
//       holding its value is known as it is combined, where the atomic
//       strategies need an arg pass (min, max).
//   1-D index, inner > 1, small (takes_atomic_rows: by default at most 2^21
//       source elements, or 128 or 256 MiB of source, by row width and
//       type) -> atomic rows (cuda/atomic_rows.cuh).
//   1-D index, inner > 1, larger -> segments over the index plan's CSR
//       (cuda/segments.cuh), with no host synchronisation (with dim_size
//       given and checked mode off, the whole call).
//   inner == 1, few slots (an outer slice's slots fit in shared memory, and
//       at least 16 entries a slot) -> shared bins (cuda/shared_bins.cuh).
//   inner == 1, or an index of src's shape -> warp runs (cuda/warp_runs.cuh).
// The atomic strategies combine into an accumulator holding the policy's
// identity (or out's values); then, for min and max, an arg pass finds the
// smallest source position holding each slot's value, and a finishing pass
// gives empty slots their value and divides mean by the counts. The segments
// finish each row themselves, min and max with their arg.
// The cost limits between strategies were measured for sum.

#include "torchplug/core/reduce/cuda/atomic_rows.cuh"
#include "torchplug/core/reduce/cuda/ordered_bins.cuh"
#include "torchplug/core/reduce/cuda/segments.cuh"
#include "torchplug/core/reduce/cuda/shared_bins.cuh"
#include "torchplug/core/reduce/cuda/sorted_values.cuh"
#include "torchplug/core/reduce/cuda/warp_runs.cuh"
#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/reduce/policy.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Context.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <limits>
#include <type_traits>

namespace torchplug::core {
namespace cuda_detail {

// ---- accumulator -------------------------------------------------------------

// Zeroes t on the current stream with one memset: a small call's zero_() costs
// a TensorIterator's host work more (docs/benchmarks.md, "Small calls: the
// accumulator").
inline void zero_async(const at::Tensor& t) {
  C10_CUDA_CHECK(
      cudaMemsetAsync(t.mutable_data_ptr(), 0, t.nbytes(), at::cuda::getCurrentCUDAStream()));
}

// to[0, V) = from[0, V), converted.
template <typename To, typename From, int V>
__device__ __forceinline__ void convert_vector(To* to, const From* from) {
  const auto loaded = *reinterpret_cast<const Vector<From, V>*>(from);
  Vector<To, V> converted;
#pragma unroll
  for (int j = 0; j < V; ++j) converted.val[j] = static_cast<To>(loaded.val[j]);
  *reinterpret_cast<Vector<To, V>*>(to) = converted;
}

// to[0, n) = from[0, n), converted: V values at a time, the last n % V one by one.
template <typename To, typename From, int V>
__global__ void convert_kernel(To* __restrict__ to, const From* __restrict__ from, int64_t n) {
  const int64_t vectors = n / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, vectors) convert_vector<To, From, V>(to + t * V, from + t * V);
  const int64_t rest = vectors * V + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (rest < n) convert_vector<To, From, 1>(to + rest, from + rest);
}

// Between a float16 or bfloat16 output and its float accumulator, in vectors as
// wide as the output's alignment allows (the accumulator, a fresh allocation,
// is aligned for any).
template <typename To, typename From>
void convert(To* to, const From* from, int64_t n) {
  using Narrow = std::conditional_t<(sizeof(To) < sizeof(From)), To, From>;
  const int width = core::vector_width<Narrow>(core::kVectorWidth<Narrow>, {to, from});
  core::with_width<Narrow>(width, [&](auto w) {
    constexpr int V = decltype(w)::value;
    core::launch(convert_kernel<To, From, V>, at::ceil_div<int64_t>(n, V), to, from, n);
  });
}

// out[i] = the policy's identity for every i < n.
template <typename Policy, typename T>
__global__ void fill_identity_kernel(T* __restrict__ out, int64_t n) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, n) out[i] = Policy::template identity<T>();
}

template <typename Policy, typename T>
void fill_identity(T* out, const at::Tensor& t) {
  if constexpr (Policy::kAtomic == core::AtomicKind::kAdd) {
    zero_async(t);  // +0.0: the result of an empty sum
  } else {
    core::launch(fill_identity_kernel<Policy, T>, t.numel(), out, t.numel());
  }
}

// ---- finishing passes ---------------------------------------------------------

// Where source element i (of outer * E * inner) lands, -1 when its index
// value lies outside [0, N); e is its position along dim.
__device__ __forceinline__ int64_t slot_of(const int64_t* __restrict__ index, int64_t i, int64_t E,
                                           int64_t inner, int64_t N, bool index_1d, int64_t& e) {
  const int64_t f = i % inner;
  const int64_t oe = i / inner;
  e = oe % E;
  const int64_t row = index_1d ? index[e] : index[i];
  if (row < 0 || row >= N) return -1;
  return ((oe / E) * N + row) * inner + f;
}

// arg[slot] = the smallest e whose source holds result[slot] (arg starts at E).
template <typename Policy, typename scalar_t, typename result_t>
__global__ void arg_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                           const result_t* __restrict__ result, int64_t* __restrict__ arg,
                           int64_t E, int64_t inner, int64_t N, int64_t numel, bool index_1d) {
  using acc_t = at::opmath_type<scalar_t>;
  TORCHPLUG_GRID_STRIDE_LOOP(i, numel) {
    int64_t e;
    const int64_t slot = slot_of(index, i, E, inner, N, index_1d, e);
    if (slot >= 0 && Policy::holds(static_cast<acc_t>(src[i]), static_cast<acc_t>(result[slot]))) {
      core::atomic_min_position(arg + slot, e);
    }
  }
}

template <typename Policy, typename scalar_t, typename result_t>
void find_args(const ScatterProblem& p, const result_t* result) {
  p.arg.fill_(p.E);
  core::launch(arg_kernel<Policy, scalar_t, result_t>, p.src.numel(), p.src.const_data_ptr<scalar_t>(),
               p.index.const_data_ptr<int64_t>(), result, p.arg.mutable_data_ptr<int64_t>(), p.E,
               p.inner, p.N, p.src.numel(), p.index_1d);
}

// counts[row] (1-D index) or counts[slot] (else) += 1 for every source that lands there.
static __global__ void count_kernel(const int64_t* __restrict__ index, int32_t* __restrict__ counts,
                             int64_t E, int64_t inner, int64_t N, int64_t numel, bool index_1d) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, numel) {
    if (index_1d) {
      const int64_t row = index[i];
      if (row >= 0 && row < N) atomicAdd(counts + row, 1);
    } else {
      int64_t e;
      const int64_t slot = slot_of(index, i, E, inner, N, false, e);
      if (slot >= 0) atomicAdd(counts + slot, 1);
    }
  }
}

// out[i] = finish(acc[i]) with each slot's count: counted (mean), or whether
// some source holds its value (min, max: arg < E).
// out and acc may be one array (float types reduce in place): no __restrict__.
template <typename Policy, typename scalar_t, typename acc_t>
__global__ void finish_kernel(scalar_t* out, const acc_t* acc,
                              const int32_t* __restrict__ counts, const int64_t* __restrict__ arg,
                              int64_t n, int64_t inner, int64_t N, int64_t E, bool index_1d,
                              bool accumulate) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, n) {
    int64_t count = 1;
    if constexpr (Policy::kDividesByCount) count = counts[index_1d ? i / inner % N : i];
    if constexpr (Policy::kHasArg) count = arg[i] < E ? 1 : 0;
    out[i] = static_cast<scalar_t>(core::finish<Policy>(acc[i], count, accumulate));
  }
}

// Runs body(src, acc) on an accumulator of p.out in src's math type: p.out
// itself, or for float16 and bfloat16 a float buffer; it holds the policy's
// identity, or out's values when accumulating. Then finds the args and
// finishes the result into p.out. For sums a memset and at most one kernel
// each way, where zeros_like, to() and copy_() would take a TensorIterator's
// host work each.
template <typename Policy, typename scalar_t, typename Body>
void with_accumulator(const ScatterProblem& p, Body body) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr bool kOwnAccumulator = std::is_same_v<acc_t, scalar_t>;
  constexpr bool kFinishes = Policy::kHasArg || Policy::kDividesByCount;
  const auto* src = p.src.const_data_ptr<scalar_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  at::Tensor buffer;
  acc_t* acc = nullptr;
  if constexpr (kOwnAccumulator) {
    acc = out;
    if (!p.accumulate) fill_identity<Policy>(acc, p.out);
  } else {
    buffer = at::empty(p.out.sizes(), p.out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    acc = buffer.mutable_data_ptr<acc_t>();
    if (p.accumulate) {
      convert(acc, out, p.out.numel());
    } else {
      fill_identity<Policy>(acc, buffer);
    }
  }
  body(src, acc);
  if constexpr (Policy::kHasArg) find_args<Policy, scalar_t>(p, acc);
  if constexpr (kFinishes) {
    at::Tensor counts;
    if constexpr (Policy::kDividesByCount) {
      counts = at::empty({p.index_1d ? p.N : p.out.numel()}, p.index.options().dtype(at::kInt));
      zero_async(counts);
      const int64_t entries = p.index_1d ? p.E : p.src.numel();
      if (p.index_1d && takes_shared_counts(p.E, p.N)) {
        launch_shared_counts(p.index.const_data_ptr<int64_t>(), counts.mutable_data_ptr<int32_t>(), p.E, p.N);
      } else {
        core::launch(count_kernel, entries, p.index.const_data_ptr<int64_t>(),
                     counts.mutable_data_ptr<int32_t>(), p.E, p.inner, p.N, entries, p.index_1d);
      }
    }
    core::launch(finish_kernel<Policy, scalar_t, acc_t>, p.out.numel(), out, acc,
                 counts.defined() ? counts.const_data_ptr<int32_t>() : nullptr,
                 Policy::kHasArg ? p.arg.const_data_ptr<int64_t>() : nullptr, p.out.numel(), p.inner,
                 p.N, p.E, p.index_1d, p.accumulate);
  } else if constexpr (!kOwnAccumulator) {
    convert(out, acc, p.out.numel());
  }
}

// ---- strategies ---------------------------------------------------------------

template <typename Policy, typename scalar_t>
void atomic_rows(const ScatterProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  with_accumulator<Policy, scalar_t>(p, [&](const scalar_t* src, acc_t* acc) {
    // Alignment is checked in src's element size: enough for acc when it is
    // the output itself; a float accumulator of float16 or bfloat16 is a fresh
    // allocation, aligned for any vector atomic.
    TORCH_INTERNAL_ASSERT((std::is_same_v<acc_t, scalar_t> || core::is_aligned(acc, 16)));
    launch_atomic_rows<Policy>(p, src, acc, Always{});
  });
}

template <typename Policy, typename scalar_t>
void shared_bins(const ScatterProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  with_accumulator<Policy, scalar_t>(
      p, [&](const scalar_t* src, acc_t* acc) { launch_shared_bins<Policy>(p, src, acc); });
}

template <typename Policy, typename scalar_t>
void warp_runs(const ScatterProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  with_accumulator<Policy, scalar_t>(
      p, [&](const scalar_t* src, acc_t* acc) { launch_warp_runs<Policy>(p, src, acc); });
}

// p as one value per source element: every element's flat output slot as its
// row (-1 when its index value lies outside [0, N)), for the ordered segments.
static __global__ void flat_slots_kernel(const int64_t* __restrict__ index, int64_t* __restrict__ slots,
                                  int64_t E, int64_t inner, int64_t N, int64_t numel, bool index_1d) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, numel) {
    int64_t e;
    slots[i] = slot_of(index, i, E, inner, N, index_1d, e);
  }
}

inline ScatterProblem flattened(const ScatterProblem& p) {
  ScatterProblem flat = p;
  const int64_t numel = p.src.numel();
  flat.src = p.src.view({numel});
  flat.index = core::scratch({numel}, p.index.options());
  core::launch(flat_slots_kernel, numel, p.index.const_data_ptr<int64_t>(),
               flat.index.mutable_data_ptr<int64_t>(), p.E, p.inner, p.N, numel, p.index_1d);
  flat.index_1d = true;
  flat.outer = 1;
  flat.E = numel;
  flat.inner = 1;
  flat.N = p.out.numel();
  flat.out = p.out.view({flat.N});
  if (p.arg.defined()) flat.arg = p.arg.view({flat.N});
  return flat;
}

// The segments over p, or over p flattened (`flat`: one value per element,
// in an order that keeps each slot's sources in source order).
template <typename Policy, typename scalar_t>
void segments(const ScatterProblem& p, bool ordered, bool flat) {
  const ScatterProblem& q = flat ? flattened(p) : p;
  if (ordered && takes_sorted_values<Policy>(q)) return sorted_values_reduce<Policy, scalar_t>(q);
  const ArgPositions positions{p.inner, flat ? p.E : 0, p.E};
  if (q.E <= std::numeric_limits<int32_t>::max()) {
    csr_reduce<Policy, scalar_t, int32_t>(q, ordered, positions);
  } else {
    csr_reduce<Policy, scalar_t, int64_t>(q, ordered, positions);
  }
}

}  // namespace cuda_detail

template <typename Policy>
void scatter_kernel_cuda(const ScatterProblem& p) {
  using namespace cuda_detail;
  if (p.out.numel() == 0) return;
  AT_DISPATCH_V2(p.src.scalar_type(), "torchplug::reduce", AT_WRAP([&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (p.src.numel() == 0) {
      if (!p.accumulate) p.out.fill_(Policy::template empty<acc_t>());
      if constexpr (Policy::kHasArg) p.arg.fill_(p.E);
    } else if (std::is_floating_point_v<acc_t> && at::globalContext().deterministicAlgorithms()) {
      if (takes_ordered_bins<Policy, scalar_t>(p)) {
        ordered_bins_reduce<Policy, scalar_t>(p);
      } else {
        segments<Policy, scalar_t>(p, true, !p.index_1d);
      }
    } else if (Policy::kAtomic != AtomicKind::kAdd && takes_ordered_bins<Policy, scalar_t>(p)) {
      ordered_bins_reduce<Policy, scalar_t>(p);
    } else if (takes_atomic_rows<Policy, scalar_t>(p)) {
      atomic_rows<Policy, scalar_t>(p);
    } else if (p.index_1d && p.inner > 1) {
      segments<Policy, scalar_t>(p, false, false);
    } else if (takes_shared_bins<acc_t>(p)) {
      shared_bins<Policy, scalar_t>(p);
    } else {
      warp_runs<Policy, scalar_t>(p);
    }
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
}

template <typename Policy>
void segment_csr_kernel_cuda(const ScatterProblem& p, const at::Tensor& indptr) {
  using namespace cuda_detail;
  if (p.out.numel() == 0) return;
  AT_DISPATCH_V2(p.src.scalar_type(), "torchplug::reduce", AT_WRAP([&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (p.src.numel() == 0) {
      p.out.fill_(Policy::template empty<acc_t>());
      if constexpr (Policy::kHasArg) p.arg.fill_(p.E);
    } else if (p.E <= std::numeric_limits<int32_t>::max()) {
      indptr_reduce<Policy, scalar_t, int32_t>(p, indptr);
    } else {
      indptr_reduce<Policy, scalar_t, int64_t>(p, indptr);
    }
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
}

}  // namespace torchplug::core

// The explicit instantiations of both entries for one policy: a family's
// translation unit per reduction is this line, so that nvcc builds the
// reductions in parallel.
#define TORCHPLUG_REDUCE_CUDA_INSTANTIATE(Policy)                                   \
  template void torchplug::core::scatter_kernel_cuda<Policy>(                       \
      const torchplug::core::ScatterProblem&);                                      \
  template void torchplug::core::segment_csr_kernel_cuda<Policy>(                   \
      const torchplug::core::ScatterProblem&, const at::Tensor&);
