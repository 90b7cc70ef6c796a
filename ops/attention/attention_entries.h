#pragma once

// The attention plugin's entry points for one device, written once:
// attention_cpu.cpp and attention_cuda.cu register them with a struct of
//   check(op, arg, t)                                  the device check
//   gatv2_scores(Gatv2Problem, out)                    out [nnz, H]
//   gatv2_backward(Gatv2Problem, grad, colptr, row, perm, grad_src, grad_dst, att_partials)
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

inline Gatv2Problem plan_gatv2(const Args& a) {
  return {a.rowptr,
          a.col,
          a.src.contiguous(),
          a.dst.contiguous(),
          a.att->contiguous(),
          a.negative_slope,
          a.rowptr.size(0) - 1,
          a.src.size(0),
          a.src.size(1),
          a.src.size(2)};
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

  static at::Tensor gatv2_scores(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                                 const at::Tensor& dst, const at::Tensor& att, double negative_slope) {
    Kernels::check(kGatv2Scores.name().c_str(), "src", src);
    const c10::DeviceGuard guard(src.device());
    const Gatv2Problem p = plan_gatv2(check_args(rowptr, col, src, dst, "gatv2", att, negative_slope, 1, 0,
                                                 std::nullopt, std::nullopt, std::nullopt, /*values=*/true));
    at::Tensor out = at::empty({col.size(0), p.H}, src.options());
    Kernels::gatv2_scores(p, out);
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
    const Gatv2Problem p = plan_gatv2(check_args(rowptr, col, src, dst, "gatv2", att, negative_slope, 1, 0, colptr,
                                                 row, perm, /*values=*/true));
    const auto math = at::toOpMathType(src.scalar_type());
    core::check_dtype(op, "grad", grad, math);
    TORCH_CHECK(grad.dim() == 2 && grad.size(0) == col.size(0) && grad.size(1) == p.H, op,
                ": argument 'grad' of shape ", grad.sizes(), " must be [nnz, H] = [", col.size(0), ", ", p.H, "]");
    const auto [want_src, want_dst, want_att] = output_mask;
    TORCH_CHECK(!want_src || colptr.has_value(), op, ": src's gradient needs the transpose (colptr, row, perm)");
    at::Tensor grad_src = want_src ? at::empty_like(p.src) : at::Tensor();
    at::Tensor grad_dst = want_dst ? at::empty_like(p.dst) : at::Tensor();
    at::Tensor partials;
    if (want_att) {
      const int64_t blocks = (p.M + kGatv2RowsPerPartial - 1) / kGatv2RowsPerPartial;
      partials = at::zeros({blocks, p.H * p.C}, src.options().dtype(math));
    }
    const at::Tensor none;
    Kernels::gatv2_backward(p, grad.contiguous(), colptr.value_or(none), row.value_or(none), perm.value_or(none),
                            grad_src, grad_dst, partials);
    at::Tensor grad_att = want_att ? partials.sum(0).to(src.scalar_type()).view({p.H, p.C}) : at::Tensor();
    return {grad_src, grad_dst, grad_att};
  }

  static void register_all(core::Library& m) {
    m.impl(kEdgeAttention, &edge_attention);
    m.impl(kGatv2Scores, &gatv2_scores);
    m.impl(kGatv2Backward, &gatv2_backward);
  }
};

}  // namespace torchplug::attention_detail
