// torchplug::scatter_sum CUDA kernels.
//
// Both kernels add runs of equal consecutive indices in registers and issue one
// atomic per run, so sorted (CSR-ordered) input costs far fewer atomics than
// random input, with no sortedness flag and no extra pass. Index values outside
// [0, N) are skipped: a bad index never writes out of bounds.
//
//   inner == 1: a warp holds 32 consecutive elements; runs are found with a
//               ballot and summed with a segmented shuffle scan.
//   inner  > 1: a thread walks kRowsPerThread consecutive rows of one column,
//               adding while the row's index repeats.

#include "scatter_kernel.h"

#include "torchplug/core/checks.h"
#include "torchplug/core/launch.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/Atomic.cuh>
#include <torch/library.h>

namespace torchplug::scatter_detail {
namespace {

constexpr int kRowsPerThread = 16;
constexpr unsigned kFullMask = 0xffffffffu;

// One warp, 32 consecutive source elements (a 1-D index, inner == 1, or any
// index of src's shape flattened): each lane adds its run's sum once.
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
      // i = (o * E + e) * inner + f; the output slot is (o * N + index) * inner + f.
      const int64_t f = i % inner;
      const int64_t oe = i / inner;
      const int64_t o = oe / E;
      const int64_t row = kIndex1d ? index[oe % E] : index[i];
      if (row >= 0 && row < N) slot = (o * N + row) * inner + f;
      value = static_cast<acc_t>(src[i]);
    }
    const int64_t prev_slot = __shfl_up_sync(kFullMask, slot, 1);
    const bool head = lane == 0 || prev_slot != slot;
    const unsigned heads = __ballot_sync(kFullMask, head);
    const int run_start = 31 - __clz(heads & (0xffffffffu >> (31 - lane)));
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const acc_t other = __shfl_up_sync(kFullMask, value, offset);
      if (lane - offset >= run_start) value += other;
    }
    const bool tail = lane == 31 || (heads >> (lane + 1)) & 1u;
    if (valid && tail && slot >= 0) gpuAtomicAdd(acc + slot, value);
  }
}

// A 1-D index and inner > 1: thread (chunk, f) sums column f over the chunk's
// kRowsPerThread rows, one atomic each time the index changes.
template <typename scalar_t, typename acc_t>
__global__ void scatter_row_runs_kernel(const scalar_t* __restrict__ src,
                                        const int64_t* __restrict__ index, acc_t* __restrict__ acc,
                                        int64_t E, int64_t inner, int64_t N, int64_t chunks,
                                        int64_t items) {
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t f = t % inner;
    const int64_t chunk = (t / inner) % chunks;
    const int64_t o = t / inner / chunks;
    const int64_t e_begin = chunk * kRowsPerThread;
    const int64_t e_end = min(e_begin + kRowsPerThread, E);
    const scalar_t* column = src + o * E * inner + f;
    acc_t* out_column = acc + o * N * inner + f;

    int64_t row = -1;
    acc_t sum = 0;
    for (int64_t e = e_begin; e < e_end; ++e) {
      const int64_t next = index[e];
      const acc_t value = static_cast<acc_t>(column[e * inner]);
      if (next != row) {
        if (row >= 0 && row < N) gpuAtomicAdd(out_column + row * inner, sum);
        row = next;
        sum = value;
      } else {
        sum += value;
      }
    }
    if (row >= 0 && row < N) gpuAtomicAdd(out_column + row * inner, sum);
  }
}

}  // namespace

void scatter_sum_kernel_cuda(const ScatterProblem& p) {
  const int64_t numel = p.src.numel();
  if (numel == 0 || p.acc.numel() == 0) return;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::scatter_sum", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto* src = p.src.const_data_ptr<scalar_t>();
    const auto* index = p.index.const_data_ptr<int64_t>();
    auto* acc = p.acc.mutable_data_ptr<acc_t>();
    if (p.index_1d && p.inner > 1) {
      const int64_t chunks = (p.E + kRowsPerThread - 1) / kRowsPerThread;
      const int64_t items = p.outer * chunks * p.inner;
      core::launch(scatter_row_runs_kernel<scalar_t, acc_t>, items, src, index, acc, p.E, p.inner,
                   p.N, chunks, items);
    } else if (p.index_1d) {
      core::launch(scatter_warp_runs_kernel<scalar_t, acc_t, true>, numel, src, index, acc, p.E,
                   p.inner, p.N, numel);
    } else {
      core::launch(scatter_warp_runs_kernel<scalar_t, acc_t, false>, numel, src, index, acc, p.E,
                   p.inner, p.N, numel);
    }
  });
}

namespace {

at::Tensor scatter_sum_cuda(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  std::optional<int64_t> size;
  if (dim_size) size = dim_size->expect_int();
  const auto problem = plan(src, index, dim, size);
  TORCHPLUG_CHECK_CUDA(kOp, src);
  const c10::cuda::CUDAGuard guard(src.device());
  scatter_sum_kernel_cuda(problem);
  return finish(problem);
}

at::Tensor& scatter_sum_inplace_cuda(at::Tensor& out, const at::Tensor& src,
                                     const at::Tensor& index, int64_t dim) {
  const auto problem = plan_inplace(out, src, index, dim);
  TORCHPLUG_CHECK_CUDA(kOp, src);
  const c10::cuda::CUDAGuard guard(src.device());
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
