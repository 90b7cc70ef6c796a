// The attention plugin on CUDA: the fused kernels, and the registration of
// every entry point (attention_entries.h). One warp per row (per column of
// the transpose for gatv2's src gradient); sums are in a fixed order (a
// lane's edges, then a butterfly), so results are deterministic. Scores and
// gatv2's activations are recomputed where needed, never stored.

#include "attention_entries.h"
#include "attention_softmax.h"
#include "torchplug/core/launch.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include <type_traits>

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

// The whole warp's state, merged by a butterfly and then lane 0's taken by
// all: every lane writes its edges with the same normaliser.
template <typename T>
__device__ __forceinline__ core::MaxExpSum<T> warp_merged(core::MaxExpSum<T> s) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const core::MaxExpSum<T> other{__shfl_xor_sync(0xffffffffu, s.max, offset),
                                   __shfl_xor_sync(0xffffffffu, s.sum, offset)};
    core::max_exp_sum_merge(s, other);
  }
  return {__shfl_sync(0xffffffffu, s.max, 0), __shfl_sync(0xffffffffu, s.sum, 0)};
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return __shfl_sync(0xffffffffu, v, 0);
}

// A warp per row, a head at a time, lanes over the row's edges: the scores'
// softmax (weights), or with kGrad the scores' gradient from the weights'
// (attention_softmax.h; attention_cpu.cpp's softmax_rows is the same program).
template <typename scalar_t, bool kGrad>
__global__ void softmax_rows_kernel(int64_t M, const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                                    EdgeScore<scalar_t> score, const scalar_t* __restrict__ grad,
                                    std::conditional_t<kGrad, at::opmath_type<scalar_t>, scalar_t>* __restrict__ out) {
  using T = at::opmath_type<scalar_t>;
  using out_t = std::conditional_t<kGrad, T, scalar_t>;
  const int64_t H = score.H;
  const WarpOf w = warp_of();
  for (int64_t r = w.warp; r < M; r += w.warps) {
    const int64_t begin = rowptr[r], end = rowptr[r + 1];
    for (int64_t h = 0; h < H; ++h) {
      core::MaxExpSum<T> state = core::max_exp_sum_init<T>();
      for (int64_t k = begin + w.lane; k < end; k += kWarp) core::max_exp_sum_update(state, score(col[k], r, h));
      const core::MaxExpSum<T> n = normaliser(warp_merged(state));
      if constexpr (!kGrad) {
        for (int64_t k = begin + w.lane; k < end; k += kWarp) {
          out[k * H + h] = static_cast<out_t>(weight(n, score(col[k], r, h)));
        }
      } else {
        T partial = 0;
        for (int64_t k = begin + w.lane; k < end; k += kWarp) {
          partial += weight(n, score(col[k], r, h)) * static_cast<T>(grad[k * H + h]);
        }
        const T sum = warp_sum(partial);
        for (int64_t k = begin + w.lane; k < end; k += kWarp) {
          T pre = 0;
          const T alpha = weight(n, score(col[k], r, h, &pre));
          T gs = alpha * (static_cast<T>(grad[k * H + h]) - sum);
          if (score.kind == Score::kGat && !(pre > T(0))) gs *= score.slope;
          out[k * H + h] = gs;
        }
      }
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

  template <bool kGrad>
  static void rows(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::edge_attention_softmax",
                                    [&] {
                                      using out_t = std::conditional_t<kGrad, at::opmath_type<scalar_t>, scalar_t>;
                                      core::launch(softmax_rows_kernel<scalar_t, kGrad>, p.M * kWarp, p.M,
                                                   p.rowptr.const_data_ptr<int64_t>(),
                                                   p.col.const_data_ptr<int64_t>(), edge_score<scalar_t>(p),
                                                   kGrad ? grad.const_data_ptr<scalar_t>() : nullptr,
                                                   out.mutable_data_ptr<out_t>());
                                    });
  }

  static void softmax(const EdgeProblem& p, const at::Tensor& out) { rows<false>(p, at::Tensor(), out); }

  static void score_grad(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& out) {
    rows<true>(p, grad, out);
  }

  static void gatv2_backward(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& colptr,
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
