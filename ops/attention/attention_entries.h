#pragma once

// The attention plugin's entry points for one device, written once:
// attention_cpu.cpp and attention_cuda.cu register them with a struct of
//   check(op, arg, t)                                  the device check
//   softmax(EdgeProblem, out)                          out [nnz, H], src's dtype
//   score_grad(EdgeProblem, grad, out)                 out [nnz, H], the math type
//   gatv2_backward(EdgeProblem, grad, colptr, row, perm, grad_src, grad_dst, att_partials)
// where each gradient output may be undefined (not wanted); att_partials
// [ceil(M / kGatv2RowsPerPartial), H * C] in the math type receives each
// block of rows' sum of the att gradient. The device guard is taken before
// the checks that read index values (on the CPU, in checked mode).

#include "attention_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>

namespace torchplug::attention_detail {

inline EdgeProblem plan(const Args& a) {
  return {a.rowptr.contiguous(),
          a.col.contiguous(),
          a.src.contiguous(),
          a.dst.contiguous(),
          a.att ? a.att->contiguous() : at::Tensor(),
          a.score,
          a.negative_slope,
          a.scale,
          a.rowptr.size(0) - 1,
          a.src.size(0),
          a.src.size(1),
          a.src.dim() == 3 ? a.src.size(2) : 1};
}

// A gradient of [nnz, H] scores or weights, of `dtype`.
inline void check_scores_grad(const char* op, const at::Tensor& grad, at::ScalarType dtype, int64_t nnz, int64_t H) {
  core::check_dtype(op, "grad", grad, dtype);
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == nnz && grad.size(1) == H, op, ": argument 'grad' of shape ",
              grad.sizes(), " must be [nnz, H] = [", nnz, ", ", H, "]");
}

template <typename Kernels>
struct AttentionEntries {
  static at::Tensor edge_attention(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                                   const at::Tensor& dst, c10::string_view score, const OptTensor& att,
                                   double negative_slope, double scale, double dropout,
                                   const std::optional<at::Generator>& generator, const OptTensor& colptr,
                                   const OptTensor& row, const OptTensor& perm) {
    Kernels::check(kEdgeAttention.name().c_str(), "src", src);
    const c10::DeviceGuard guard(src.device());
    const Args a = check_args(rowptr, col, src, dst, score, att, negative_slope, scale, dropout, colptr, row, perm,
                              /*values=*/true);
    return forward(a, generator);
  }

  static at::Tensor softmax(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                            const at::Tensor& dst, c10::string_view score, const OptTensor& att,
                            double negative_slope, double scale) {
    Kernels::check(kSoftmax.name().c_str(), "src", src);
    const c10::DeviceGuard guard(src.device());
    const EdgeProblem p = plan(check_args(rowptr, col, src, dst, score, att, negative_slope, scale, 0, std::nullopt,
                                          std::nullopt, std::nullopt, /*values=*/true));
    at::Tensor out = at::empty({col.size(0), p.H}, src.options());
    Kernels::softmax(p, out);
    return out;
  }

  static at::Tensor score_grad(const at::Tensor& grad, const at::Tensor& rowptr, const at::Tensor& col,
                               const at::Tensor& src, const at::Tensor& dst, c10::string_view score,
                               const OptTensor& att, double negative_slope, double scale) {
    const char* op = kScoreGrad.name().c_str();
    Kernels::check(op, "src", src);
    core::check_same_device(op, {TORCHPLUG_ARG(grad), TORCHPLUG_ARG(src)});
    const c10::DeviceGuard guard(src.device());
    const EdgeProblem p = plan(check_args(rowptr, col, src, dst, score, att, negative_slope, scale, 0, std::nullopt,
                                          std::nullopt, std::nullopt, /*values=*/true));
    check_scores_grad(op, grad, src.scalar_type(), col.size(0), p.H);
    at::Tensor out = at::empty({col.size(0), p.H}, src.options().dtype(at::toOpMathType(src.scalar_type())));
    Kernels::score_grad(p, grad.contiguous(), out);
    return out;
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> gatv2_backward(
      const at::Tensor& grad, const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
      const at::Tensor& dst, const at::Tensor& att, double negative_slope, const OptTensor& colptr,
      const OptTensor& row, const OptTensor& perm, std::array<bool, 3> output_mask) {
    const char* op = kGatv2Backward.name().c_str();
    Kernels::check(op, "src", src);
    core::check_same_device(op, {TORCHPLUG_ARG(grad), TORCHPLUG_ARG(src)});
    const c10::DeviceGuard guard(src.device());
    const EdgeProblem p = plan(check_args(rowptr, col, src, dst, "gatv2", att, negative_slope, 1, 0, colptr, row, perm,
                                          /*values=*/true));
    const auto math = at::toOpMathType(src.scalar_type());
    check_scores_grad(op, grad, math, col.size(0), p.H);
    const auto [want_src, want_dst, want_att] = output_mask;
    TORCH_CHECK(!want_src || colptr.has_value(), op, ": src's gradient needs the transpose (colptr, row, perm)");
    at::Tensor grad_src = want_src ? at::empty(p.src.sizes(), p.src.options()) : at::Tensor();
    at::Tensor grad_dst = want_dst ? at::empty(p.dst.sizes(), p.dst.options()) : at::Tensor();
    at::Tensor partials;
    if (want_att) {
      const int64_t blocks = (p.M + kGatv2RowsPerPartial - 1) / kGatv2RowsPerPartial;
      partials = at::zeros({blocks, p.H * p.C}, src.options().dtype(math));
    }
    const at::Tensor none;
    const auto dense = [&](const OptTensor& t) { return t ? t->contiguous() : none; };
    Kernels::gatv2_backward(p, grad.contiguous(), dense(colptr), dense(row), dense(perm), grad_src, grad_dst,
                            partials);
    at::Tensor grad_att = want_att ? partials.sum(0).to(src.scalar_type()).view({p.H, p.C}) : at::Tensor();
    return {grad_src, grad_dst, grad_att};
  }

  static void register_all(core::Library& m) {
    m.impl(kEdgeAttention, &edge_attention);
    m.impl(kSoftmax, &softmax);
    m.impl(kScoreGrad, &score_grad);
    m.impl(kGatv2Backward, &gatv2_backward);
  }
};

}  // namespace torchplug::attention_detail
