// torchplug::scatter_sum CUDA kernels. Index values outside [0, N) are
// skipped by every kernel: a bad index never writes out of bounds.
//
// Which kernel runs:
//   1-D index, inner > 1, index mostly sorted -> row runs: a thread walks
//       kRowsPerThread consecutive rows of one column vector, adds while the
//       row's index repeats and issues one (vector) atomic per run.
//   1-D index, inner > 1, otherwise -> segments: a counting sort of the index
//       (counts, prefix sum, permutation) turns the scatter into a segmented
//       gather: each output row is read from its sources and written once. No
//       atomics on the output, no zero fill, no read-modify-write of rows the
//       L2 cannot hold; extra memory is O(E + N), never O(E x F).
//   inner == 1, or an index of src's shape -> warp runs: 32 consecutive
//       elements per warp; runs of equal slots are found with a ballot, summed
//       with a segmented shuffle scan and added with one atomic each.
// Sortedness is judged from a sample of adjacent index pairs, so nobody has to
// say the index is sorted; a wrong guess costs speed, never correctness.

#include "scatter_kernel.h"

#include "torchplug/core/atomic.cuh"
#include "torchplug/core/checks.h"
#include "torchplug/core/launch.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace torchplug::scatter_detail {
namespace {

using core::Vector;

constexpr int kRowsPerThread = 16;
constexpr int kSortSamples = 4096;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T, int V>
__device__ __forceinline__ void load_as(const T* ptr, at::opmath_type<T> (&values)[V]) {
  const auto loaded = *reinterpret_cast<const Vector<T, V>*>(ptr);
#pragma unroll
  for (int k = 0; k < V; ++k) values[k] = static_cast<at::opmath_type<T>>(loaded.val[k]);
}

// ---- warp runs ---------------------------------------------------------------

template <typename scalar_t, typename acc_t, bool kIndex1d>
__global__ void scatter_warp_runs_kernel(const scalar_t* __restrict__ src,
                                         const int64_t* __restrict__ index, acc_t* __restrict__ acc,
                                         int64_t E, int64_t inner, int64_t N, int64_t numel) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) / 32;
  const int64_t first_warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  for (int64_t w = first_warp; w * 32 < numel; w += warps) {
    const int64_t i = w * 32 + lane;
    const bool valid = i < numel;
    int64_t slot = -1;
    acc_t value = 0;
    if (valid) {
      // i = (o * E + e) * inner + f lands in slot (o * N + index) * inner + f.
      const int64_t f = inner == 1 ? 0 : i % inner;
      const int64_t oe = inner == 1 ? i : i / inner;
      const int64_t row = kIndex1d ? index[oe % E] : index[i];
      if (row >= 0 && row < N) slot = (oe / E * N + row) * inner + f;
      value = static_cast<acc_t>(src[i]);
    }
    const int64_t prev_slot = __shfl_up_sync(kFullMask, slot, 1);
    const bool head = lane == 0 || prev_slot != slot;
    const unsigned heads = __ballot_sync(kFullMask, head);
    const int run_start = 31 - __clz(heads & (kFullMask >> (31 - lane)));
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const acc_t other = __shfl_up_sync(kFullMask, value, offset);
      if (lane - offset >= run_start) value += other;
    }
    const bool tail = lane == 31 || ((heads >> (lane + 1)) & 1u);
    if (valid && tail && slot >= 0) core::atomic_add(acc + slot, value);
  }
}

// ---- row runs ----------------------------------------------------------------

template <typename scalar_t, typename acc_t, int V>
__global__ void scatter_row_runs_kernel(const scalar_t* __restrict__ src,
                                        const int64_t* __restrict__ index, acc_t* __restrict__ acc,
                                        int64_t E, int64_t inner, int64_t N, int64_t chunks,
                                        int64_t items) {
  const int64_t vectors = inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t v = t % vectors;
    const int64_t chunk = (t / vectors) % chunks;
    const int64_t o = t / vectors / chunks;
    const int64_t e_begin = chunk * kRowsPerThread;
    const int64_t e_end = min(e_begin + kRowsPerThread, E);
    const scalar_t* column = src + o * E * inner + v * V;
    acc_t* out_column = acc + o * N * inner + v * V;

    int64_t row = -1;
    acc_t sum[V];
    for (int64_t e = e_begin; e < e_end; ++e) {
      const int64_t next = index[e];
      acc_t value[V];
      load_as<scalar_t, V>(column + e * inner, value);
      if (next != row) {
        if (row >= 0 && row < N) core::atomic_add_vector(out_column + row * inner, sum);
        row = next;
#pragma unroll
        for (int k = 0; k < V; ++k) sum[k] = value[k];
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) sum[k] += value[k];
      }
    }
    if (row >= 0 && row < N) core::atomic_add_vector(out_column + row * inner, sum);
  }
}

// ---- segments ----------------------------------------------------------------

// counts[row + 1] = how many entries of index name row.
__global__ void count_rows_kernel(const int64_t* __restrict__ index, int64_t E, int64_t N,
                                  int64_t* __restrict__ counts) {
  TORCHPLUG_GRID_STRIDE_LOOP(e, E) {
    const int64_t row = index[e];
    if (row >= 0 && row < N) core::atomic_add<int64_t>(counts + row + 1, 1);
  }
}

// perm[rowptr[row] ...] = the entries naming row, in arbitrary order.
__global__ void fill_perm_kernel(const int64_t* __restrict__ index, int64_t E, int64_t N,
                                 int64_t* __restrict__ cursor, int64_t* __restrict__ perm) {
  TORCHPLUG_GRID_STRIDE_LOOP(e, E) {
    const int64_t row = index[e];
    if (row >= 0 && row < N) {
      const auto slot = atomicAdd(reinterpret_cast<unsigned long long*>(cursor + row), 1ull);
      perm[slot] = e;
    }
  }
}

// One thread per (outer, row, column vector): sums the row's sources, writes once.
template <typename scalar_t, int V>
__global__ void segment_sum_kernel(const scalar_t* __restrict__ src,
                                   const int64_t* __restrict__ rowptr,
                                   const int64_t* __restrict__ perm, scalar_t* __restrict__ out,
                                   int64_t E, int64_t inner, int64_t N, int64_t items,
                                   bool accumulate) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int kUnroll = 4;
  const int64_t vectors = inner / V;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t v = t % vectors;
    const int64_t row = (t / vectors) % N;
    const int64_t o = t / vectors / N;
    const scalar_t* column = src + o * E * inner + v * V;
    scalar_t* target = out + (o * N + row) * inner + v * V;

    acc_t sum[V] = {};
    if (accumulate) load_as<scalar_t, V>(target, sum);
    int64_t k = rowptr[row];
    const int64_t end = rowptr[row + 1];
    for (; k + kUnroll <= end; k += kUnroll) {
      int64_t e[kUnroll];
      acc_t value[kUnroll][V];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) e[u] = perm[k + u];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load_as<scalar_t, V>(column + e[u] * inner, value[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < V; ++j) sum[j] += value[u][j];
      }
    }
    for (; k < end; ++k) {
      acc_t value[V];
      load_as<scalar_t, V>(column + perm[k] * inner, value);
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] += value[j];
    }
    Vector<scalar_t, V> result;
#pragma unroll
    for (int j = 0; j < V; ++j) result.val[j] = static_cast<scalar_t>(sum[j]);
    *reinterpret_cast<Vector<scalar_t, V>*>(target) = result;
  }
}

// Counts index pairs (index[e], index[e + 1]) that decrease, over a sample.
__global__ void count_descents_kernel(const int64_t* __restrict__ index, int64_t E, int samples,
                                      int* __restrict__ descents) {
  TORCHPLUG_GRID_STRIDE_LOOP(s, samples) {
    const int64_t e = s * (E - 1) / samples;
    if (index[e] > index[e + 1]) atomicAdd(descents, 1);
  }
}

bool mostly_sorted(const at::Tensor& index) {
  const int64_t E = index.numel();
  if (E < 2) return true;
  const int samples = static_cast<int>(std::min<int64_t>(E - 1, kSortSamples));
  auto descents = at::zeros({1}, index.options().dtype(at::kInt));
  core::launch(count_descents_kernel, samples, index.const_data_ptr<int64_t>(), E, samples,
               descents.mutable_data_ptr<int>());
  return descents.item<int>() * 64 <= samples;
}

// ---- dispatch ----------------------------------------------------------------

// The widest vector of V values (16 bytes at most) that divides inner and fits
// the alignment of every pointer the kernel steps through.
template <typename scalar_t>
int vector_width(int64_t inner, std::initializer_list<const void*> pointers) {
  for (int width = core::kVectorWidth<scalar_t>; width > 1; width /= 2) {
    bool fits = inner % width == 0;
    for (const void* ptr : pointers) fits = fits && core::is_aligned(ptr, width * sizeof(scalar_t));
    if (fits) return width;
  }
  return 1;
}

template <int... Widths, typename Body>
void with_width(int width, Body body) {
  ((width == Widths ? (body(std::integral_constant<int, Widths>{}), true) : false) || ...);
}

template <typename scalar_t>
void segment_sum(const ScatterProblem& p) {
  const auto long_options = p.index.options();
  auto counts = at::zeros({p.N + 1}, long_options);
  core::launch(count_rows_kernel, p.E, p.index.const_data_ptr<int64_t>(), p.E, p.N,
               counts.mutable_data_ptr<int64_t>());
  const auto rowptr = at::cumsum(counts, 0);
  auto cursor = rowptr.narrow(0, 0, p.N).clone();
  auto perm = at::empty({p.E}, long_options);
  core::launch(fill_perm_kernel, p.E, p.index.const_data_ptr<int64_t>(), p.E, p.N,
               cursor.mutable_data_ptr<int64_t>(), perm.mutable_data_ptr<int64_t>());

  const auto* src = p.src.const_data_ptr<scalar_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  const int width = vector_width<scalar_t>(p.inner, {src, out});
  with_width<16, 8, 4, 2, 1>(width, [&](auto w) {
    constexpr int V = decltype(w)::value;
    if constexpr (V <= core::kVectorWidth<scalar_t>) {
      const int64_t items = p.outer * p.N * (p.inner / V);
      core::launch(segment_sum_kernel<scalar_t, V>, items, src, rowptr.const_data_ptr<int64_t>(),
                   perm.const_data_ptr<int64_t>(), out, p.E, p.inner, p.N, items, p.accumulate);
    }
  });
}

template <typename scalar_t>
void atomic_sum(const ScatterProblem& p, bool row_runs) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto acc_tensor = accumulator(p);
  const auto* src = p.src.const_data_ptr<scalar_t>();
  const auto* index = p.index.const_data_ptr<int64_t>();
  auto* acc = acc_tensor.mutable_data_ptr<acc_t>();
  if (row_runs) {
    // Float accumulators take 16-byte vector atomics, which need 16-byte alignment.
    int width = vector_width<scalar_t>(p.inner, {src});
    if (!core::is_aligned(acc, 16)) width = std::min(width, 2);
    const int64_t chunks = (p.E + kRowsPerThread - 1) / kRowsPerThread;
    with_width<16, 8, 4, 2, 1>(width, [&](auto w) {
      constexpr int V = decltype(w)::value;
      if constexpr (V <= core::kVectorWidth<scalar_t>) {
        const int64_t items = p.outer * chunks * (p.inner / V);
        core::launch(scatter_row_runs_kernel<scalar_t, acc_t, V>, items, src, index, acc, p.E,
                     p.inner, p.N, chunks, items);
      }
    });
  } else if (p.index_1d) {
    core::launch(scatter_warp_runs_kernel<scalar_t, acc_t, true>, p.src.numel(), src, index, acc,
                 p.E, p.inner, p.N, p.src.numel());
  } else {
    core::launch(scatter_warp_runs_kernel<scalar_t, acc_t, false>, p.src.numel(), src, index, acc,
                 p.E, p.inner, p.N, p.src.numel());
  }
  store_accumulator(p, acc_tensor);
}

}  // namespace

void scatter_sum_kernel_cuda(const ScatterProblem& p) {
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::scatter_sum", [&] {
    if (p.out.numel() == 0) return;
    if (p.src.numel() == 0) {
      if (!p.accumulate) p.out.zero_();
      return;
    }
    if (p.index_1d && p.inner > 1) {
      if (mostly_sorted(p.index)) {
        atomic_sum<scalar_t>(p, /*row_runs=*/true);
      } else {
        segment_sum<scalar_t>(p);
      }
    } else {
      atomic_sum<scalar_t>(p, /*row_runs=*/false);
    }
  });
}

namespace {

at::Tensor scatter_sum_cuda(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  std::optional<int64_t> size;
  if (dim_size) size = dim_size->expect_int();
  TORCHPLUG_CHECK_CUDA(kOp, src);
  const c10::cuda::CUDAGuard guard(src.device());
  const auto problem = plan(src, index, dim, size);
  scatter_sum_kernel_cuda(problem);
  return problem.out;
}

at::Tensor& scatter_sum_inplace_cuda(at::Tensor& out, const at::Tensor& src,
                                     const at::Tensor& index, int64_t dim) {
  TORCHPLUG_CHECK_CUDA(kOp, src);
  const c10::cuda::CUDAGuard guard(src.device());
  const auto problem = plan_inplace(out, src, index, dim);
  scatter_sum_kernel_cuda(problem);
  finish_inplace(problem, out);
  return out;
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, CUDA, m) {
  m.impl("scatter_sum", &torchplug::scatter_detail::scatter_sum_cuda);
  m.impl("scatter_sum_", &torchplug::scatter_detail::scatter_sum_inplace_cuda);
}
