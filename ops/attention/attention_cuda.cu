// The attention plugin on CUDA: gatv2's fused kernels, and the registration
// of every entry point (attention_entries.h; edge_attention's forward runs
// the other fused ops' CUDA kernels). One warp per row (per column of the
// transpose for src's gradient); each output value is summed by one lane in
// its edges' order, so results are deterministic. The activation
// z = src[c] + dst[r] is recomputed where needed, never stored.

#include "attention_entries.h"
#include "torchplug/core/launch.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

namespace torchplug::attention_detail {
namespace {

constexpr int kWarp = 32;

struct WarpOf {
  int64_t warp, warps;
  int lane;
};

__device__ __forceinline__ WarpOf warp_of() {
  const int64_t thread = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  return {thread / kWarp, int64_t{gridDim.x} * blockDim.x / kWarp, static_cast<int>(threadIdx.x % kWarp)};
}

template <typename acc_t>
__device__ __forceinline__ acc_t act(acc_t z, acc_t slope) {
  return z > 0 ? z : z * slope;
}

// Lanes over the row's (edge, head) pairs, a loop over C each.
template <typename scalar_t>
__global__ void gatv2_scores_kernel(int64_t M, const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                                    const scalar_t* __restrict__ src, const scalar_t* __restrict__ dst,
                                    const scalar_t* __restrict__ att, double negative_slope, int64_t H, int64_t C,
                                    scalar_t* __restrict__ out) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t slope = static_cast<acc_t>(negative_slope);
  const WarpOf w = warp_of();
  for (int64_t r = w.warp; r < M; r += w.warps) {
    const scalar_t* d = dst + r * H * C;
    for (int64_t item = rowptr[r] * H + w.lane; item < rowptr[r + 1] * H; item += kWarp) {
      const int64_t k = item / H, h = item % H;
      const scalar_t* s = src + col[k] * H * C + h * C;
      acc_t score = 0;
      for (int64_t i = 0; i < C; ++i) {
        const acc_t z = static_cast<acc_t>(s[i]) + static_cast<acc_t>(d[h * C + i]);
        score += static_cast<acc_t>(att[h * C + i]) * act(z, slope);
      }
      out[item] = static_cast<scalar_t>(score);
    }
  }
}

// dst's gradient and att's partial sums: a warp per block of
// kGatv2RowsPerPartial rows, lanes over the features.
template <typename scalar_t>
__global__ void gatv2_rows_backward_kernel(int64_t M, const int64_t* __restrict__ rowptr,
                                           const int64_t* __restrict__ col, const scalar_t* __restrict__ src,
                                           const scalar_t* __restrict__ dst, const scalar_t* __restrict__ att,
                                           const at::opmath_type<scalar_t>* __restrict__ grad, double negative_slope,
                                           int64_t H, int64_t C, scalar_t* __restrict__ grad_dst,
                                           at::opmath_type<scalar_t>* __restrict__ partials) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t slope = static_cast<acc_t>(negative_slope);
  const int64_t F = H * C, blocks = (M + kGatv2RowsPerPartial - 1) / kGatv2RowsPerPartial;
  const WarpOf w = warp_of();
  for (int64_t b = w.warp; b < blocks; b += w.warps) {
    const int64_t last = min(M, (b + 1) * kGatv2RowsPerPartial);
    for (int64_t f = w.lane; f < F; f += kWarp) {
      const acc_t a = static_cast<acc_t>(att[f]);
      const int64_t h = f / C;
      acc_t att_sum = 0;
      for (int64_t r = b * kGatv2RowsPerPartial; r < last; ++r) {
        const acc_t d = static_cast<acc_t>(dst[r * F + f]);
        acc_t sum = 0;
        for (int64_t k = rowptr[r]; k < rowptr[r + 1]; ++k) {
          const acc_t z = static_cast<acc_t>(src[col[k] * F + f]) + d;
          const acc_t g = grad[k * H + h];
          sum += g * a * (z > 0 ? acc_t(1) : slope);
          att_sum += g * act(z, slope);
        }
        if (grad_dst != nullptr) grad_dst[r * F + f] = static_cast<scalar_t>(sum);
      }
      if (partials != nullptr) partials[b * F + f] = att_sum;
    }
  }
}

// src's gradient: a warp per column of the transpose, lanes over the features.
template <typename scalar_t>
__global__ void gatv2_columns_backward_kernel(int64_t N, const int64_t* __restrict__ colptr,
                                              const int64_t* __restrict__ row, const int64_t* __restrict__ perm,
                                              const scalar_t* __restrict__ src, const scalar_t* __restrict__ dst,
                                              const scalar_t* __restrict__ att,
                                              const at::opmath_type<scalar_t>* __restrict__ grad,
                                              double negative_slope, int64_t H, int64_t C,
                                              scalar_t* __restrict__ grad_src) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t slope = static_cast<acc_t>(negative_slope);
  const int64_t F = H * C;
  const WarpOf w = warp_of();
  for (int64_t c = w.warp; c < N; c += w.warps) {
    for (int64_t f = w.lane; f < F; f += kWarp) {
      const acc_t a = static_cast<acc_t>(att[f]), s = static_cast<acc_t>(src[c * F + f]);
      const int64_t h = f / C;
      acc_t sum = 0;
      for (int64_t j = colptr[c]; j < colptr[c + 1]; ++j) {
        const acc_t z = s + static_cast<acc_t>(dst[row[j] * F + f]);
        sum += grad[perm[j] * H + h] * a * (z > 0 ? acc_t(1) : slope);
      }
      grad_src[c * F + f] = static_cast<scalar_t>(sum);
    }
  }
}

template <typename T>
T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.mutable_data_ptr<T>() : nullptr;
}

struct CudaKernels {
  static void check(const char* op, const char* arg, const at::Tensor& t) { core::check_cuda(op, arg, t); }

  static void gatv2_scores(const Gatv2Problem& p, const at::Tensor& out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(),
                                    "torchplug::edge_attention_gatv2_scores", [&] {
                                      core::launch(gatv2_scores_kernel<scalar_t>, p.M * kWarp, p.M,
                                                   p.rowptr.const_data_ptr<int64_t>(),
                                                   p.col.const_data_ptr<int64_t>(),
                                                   p.src.const_data_ptr<scalar_t>(),
                                                   p.dst.const_data_ptr<scalar_t>(),
                                                   p.att.const_data_ptr<scalar_t>(), p.negative_slope, p.H, p.C,
                                                   out.mutable_data_ptr<scalar_t>());
                                    });
  }

  static void gatv2_backward(const Gatv2Problem& p, const at::Tensor& grad, const at::Tensor& colptr,
                             const at::Tensor& row, const at::Tensor& perm, const at::Tensor& grad_src,
                             const at::Tensor& grad_dst, const at::Tensor& partials) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::edge_attention_gatv2_backward", [&] {
          using acc_t = at::opmath_type<scalar_t>;
          if (grad_dst.defined() || partials.defined()) {
            const int64_t blocks = (p.M + kGatv2RowsPerPartial - 1) / kGatv2RowsPerPartial;
            core::launch(gatv2_rows_backward_kernel<scalar_t>, blocks * kWarp, p.M,
                         p.rowptr.const_data_ptr<int64_t>(), p.col.const_data_ptr<int64_t>(),
                         p.src.const_data_ptr<scalar_t>(), p.dst.const_data_ptr<scalar_t>(),
                         p.att.const_data_ptr<scalar_t>(), grad.const_data_ptr<acc_t>(), p.negative_slope, p.H, p.C,
                         data_or_null<scalar_t>(grad_dst), data_or_null<acc_t>(partials));
          }
          if (grad_src.defined()) {
            core::launch(gatv2_columns_backward_kernel<scalar_t>, p.N * kWarp, p.N,
                         colptr.const_data_ptr<int64_t>(), row.const_data_ptr<int64_t>(),
                         perm.const_data_ptr<int64_t>(), p.src.const_data_ptr<scalar_t>(),
                         p.dst.const_data_ptr<scalar_t>(), p.att.const_data_ptr<scalar_t>(),
                         grad.const_data_ptr<acc_t>(), p.negative_slope, p.H, p.C,
                         grad_src.mutable_data_ptr<scalar_t>());
          }
        });
  }
};

}  // namespace
}  // namespace torchplug::attention_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  torchplug::attention_detail::AttentionEntries<torchplug::attention_detail::CudaKernels>::register_all(m);
}
