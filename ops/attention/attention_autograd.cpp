// Autograd of edge_attention. The forward is the op itself (its device or
// Meta kernel, below autograd); backward reads dropout's mask off the output
// (an edge kept has a nonzero weight wherever alpha is nonzero, and where
// alpha is 0 the mask takes no part). With g the output's gradient, masked
// and scaled, one fused kernel (edge_attention_score_grad) recomputes the
// softmax alpha from the saved inputs per row and gives the score's gradient
//   gs = alpha * (g - S[row]),  S = the row's sum of alpha * g
// (gat: gp = gs * act'(pre), the gradient before the activation); then
//   gat    dst: segment_sum_csr(gp) over the rows; src:
//          the same over the transpose's columns (gp in the transpose's order)
//   gatv2  gz = gs * att * act'(z) per feature, summed as gat's gp; att:
//          the sum over the edges of gs * act(z); one fused kernel
//          (edge_attention_gatv2_backward) recomputes z per edge
//   dot    dst (queries): spmm_sum(rowptr, col, scale * gs, src), per head;
//          src (keys): the same over the transpose with dst
// Every step is a deterministic segment reduction or gather: no atomics.
// Under create_graph (double backward) the forward is recomputed from
// differentiable ops whose backward is deterministic too, and differentiated.

#include "attention_kernel.h"
#include "torchplug/core/autograd.h"
#include "torchplug/core/library.h"

#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/where.h>
#include <c10/core/GradMode.h>
#include <torch/autograd.h>

namespace torchplug::attention_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

OptTensor given(const at::Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; }

struct Wanted {
  bool src, dst, att;
};

// The gradients of the softmax of `a`'s scores for its gradient g, by
// autograd over the forward recomputed from differentiable ops.
variable_list recomputed_gradients(const Args& a, const at::Tensor& g, Wanted wanted) {
  std::vector<at::Tensor> inputs;
  if (wanted.src) inputs.push_back(a.src);
  if (wanted.dst) inputs.push_back(a.dst);
  if (wanted.att) inputs.push_back(*a.att);
  const at::Tensor alpha = softmax_csr(differentiable_scores(a), a.rowptr);
  const auto grads = torch::autograd::grad({alpha}, inputs, {g}, /*retain_graph=*/true, /*create_graph=*/true,
                                           /*allow_unused=*/true);
  variable_list out(3);
  size_t i = 0;
  if (wanted.src) out[0] = grads[i++];
  if (wanted.dst) out[1] = grads[i++];
  if (wanted.att) out[2] = grads[i++];
  return out;
}

// The gradients through the fused kernels: the scores' gradient (gat: the
// value's before the activation) in one pass per row, then to both ends.
variable_list fused_gradients(const Args& a, const at::Tensor& g, Wanted wanted) {
  const auto dtype = a.src.scalar_type();
  const auto math = at::toOpMathType(dtype);
  const at::Tensor gs = score_grad(g, a);
  at::Tensor colptr, row, perm;
  if (wanted.src) {
    if (a.colptr) {
      colptr = *a.colptr, row = *a.row, perm = *a.perm;
    } else {
      std::tie(colptr, row, perm) = transpose(a.rowptr, a.col, a.src.sym_size(0));
    }
  }
  // gat's and gatv2's per-edge gradient gp to both ends: summed per row
  // (dst) and per column over the transpose (src).
  variable_list out(3);
  const auto to_ends = [&](const at::Tensor& gp) {
    if (wanted.dst) out[1] = segment_sum_csr(gp, a.rowptr).to(dtype);
    if (wanted.src) out[0] = segment_sum_csr(gather_coo(gp, perm), colptr).to(dtype);
  };
  switch (a.score) {
    case Score::kGat:
      to_ends(gs);
      break;
    case Score::kGatV2: {
      auto [src, dst, att] =
          gatv2_backward(gs, a, given(colptr), given(row), given(perm), {wanted.src, wanted.dst, wanted.att});
      out[0] = src, out[1] = dst, out[2] = att;
      break;
    }
    case Score::kDot: {
      const at::Tensor weights = gs * a.scale;
      if (wanted.dst) out[1] = spmm_sum(a.rowptr, a.col, weights, a.src.to(math)).to(dtype);
      if (wanted.src) out[0] = spmm_sum(colptr, row, gather_coo(weights, perm), a.dst.to(math)).to(dtype);
      break;
    }
  }
  return out;
}

class EdgeAttentionFunction : public torch::autograd::Function<EdgeAttentionFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rowptr, const at::Tensor& col,
                            const at::Tensor& src, const at::Tensor& dst, c10::string_view score,
                            const OptTensor& att, double negative_slope, double scale, double dropout,
                            const std::optional<at::Generator>& generator, const OptTensor& colptr,
                            const OptTensor& row, const OptTensor& perm) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const at::Tensor out = call_edge_attention(rowptr, col, src, dst, score, att, negative_slope, scale, dropout,
                                               generator, colptr, row, perm);
    ctx->save_for_backward({rowptr, col, src, dst, att.value_or(at::Tensor()), colptr.value_or(at::Tensor()),
                            row.value_or(at::Tensor()), perm.value_or(at::Tensor()), out});
    ctx->saved_data["score"] = std::string(score);
    ctx->saved_data["negative_slope"] = negative_slope;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dropout"] = dropout;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Args a = check_args(s[0], s[1], s[2], s[3], ctx->saved_data["score"].toStringRef(), given(s[4]),
                              ctx->saved_data["negative_slope"].toDouble(), ctx->saved_data["scale"].toDouble(),
                              ctx->saved_data["dropout"].toDouble(), given(s[5]), given(s[6]), given(s[7]),
                              /*values=*/false);
    at::Tensor g = grads[0];
    if (a.dropout > 0) g = at::where(s[8] != 0, g * (1 / (1 - a.dropout)), 0);
    // needs_input_grad counts tensor inputs only: att is the fifth.
    const Wanted wanted{ctx->needs_input_grad(2), ctx->needs_input_grad(3), a.att && ctx->needs_input_grad(4)};
    const variable_list d =
        c10::GradMode::is_enabled() ? recomputed_gradients(a, g, wanted) : fused_gradients(a, g, wanted);
    return {Variable(), Variable(), d[0],      d[1],      Variable(), d[2],      Variable(),
            Variable(), Variable(), Variable(), Variable(), Variable(), Variable()};
  }
};

}  // namespace
}  // namespace torchplug::attention_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, Autograd, m) {
  using namespace torchplug::attention_detail;
  m.impl(kEdgeAttention, torchplug::core::autograd_kernel<EdgeAttentionFunction>(kEdgeAttention));
}
