// Autograd of spmm, with g the output's gradient ([M, F]) and w the edge
// weights (value, or 1):
//   sum   x: A^T g, an spmm over the transpose (edges stably sorted by col:
//         no atomics, the same bits every run); value: g[row(k)] . x[col(k)]
//   mean  the same with w / deg(row) and g[row(k)] . x[col(k)] / deg(row)
//   min, max  the gradient goes to the arg edge of each output element:
//         x[col(arg)] gets g w(arg), value(arg) gets g x[col(arg)]
// Every backward is built from differentiable ops (spmm_sum itself among
// them), so double backward works. The transpose is built on the device
// with no host synchronisation (a stable sort, a binary search).

#include "spmm_kernel.h"
#include "torchplug/core/autograd.h"
#include "torchplug/core/checks.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace torchplug::spmm_detail {
namespace {

using core::MeanPolicy;
using core::SumPolicy;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// The CSR's transpose for N columns: colptr [N + 1], and for each edge of
// the transpose (the CSR's edges stably sorted by col) its row and its CSR
// position. row_of_edge: each CSR edge's row.
struct Transpose {
  at::Tensor colptr, row, perm, row_of_edge;
};

Transpose transpose(const at::Tensor& rowptr, const at::Tensor& col, int64_t N) {
  const int64_t M = rowptr.size(0) - 1;
  const int64_t nnz = col.size(0);
  Transpose t;
  const auto degrees = rowptr.narrow(0, 1, M) - rowptr.narrow(0, 0, M);
  t.row_of_edge = at::repeat_interleave(degrees, std::optional<int64_t>(nnz));  // each edge's row
  const auto [sorted, perm] = col.sort(/*stable=*/true, 0, false);
  t.perm = perm;
  t.row = t.row_of_edge.index_select(0, perm);
  t.colptr = at::searchsorted(sorted, at::arange(N + 1, col.options()));
  return t;
}

// x's gradient and value's (undefined where not wanted) for output gradient g.
template <typename Policy>
std::pair<at::Tensor, at::Tensor> gradients(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value,
                                            const at::Tensor& x, const at::Tensor& arg, const at::Tensor& g,
                                            bool value_grad) {
  const int64_t M = rowptr.size(0) - 1, N = x.size(0), nnz = col.size(0);
  const int64_t F = c10::multiply_integers(x.sizes().slice(1));
  if (nnz == 0) {  // no message reached any row
    return {at::zeros_like(x), value_grad ? at::zeros({0}, g.options()) : at::Tensor()};
  }
  const auto x2 = x.reshape({N, F});
  const auto g2 = g.reshape({M, F});
  if constexpr (Policy::kHasArg) {
    const auto edges = arg.reshape({M, -1});
    const auto held = edges.lt(nnz);
    const auto k = at::where(held, edges, 0);
    const auto c = col.index_select(0, k.reshape(-1)).view_as(k);
    const auto weight = value.defined() ? value.index_select(0, k.reshape(-1)).view_as(k) : at::ones_like(g2);
    const auto x_grad = at::zeros_like(x2).scatter_add(0, c, at::where(held, g2 * weight, 0)).view_as(x);
    at::Tensor value_grad_out;
    if (value_grad) {
      value_grad_out = at::zeros({nnz}, g.options())
                           .index_add(0, k.reshape(-1), at::where(held, g2 * x2.gather(0, c), 0).reshape(-1));
    }
    return {x_grad, value_grad_out};
  } else {
    const Transpose t = transpose(rowptr, col, N);
    auto weight = value.defined() ? value : at::ones({nnz}, x.options());
    at::Tensor scale;  // mean: 1 / deg(row) per edge
    if constexpr (Policy::kDividesByCount) {
      const auto degrees = (rowptr.narrow(0, 1, M) - rowptr.narrow(0, 0, M)).clamp_min(1).to(x.scalar_type());
      scale = degrees.reciprocal().index_select(0, t.row_of_edge);
      weight = weight * scale;
    }
    const auto x_grad = call_spmm<SumPolicy>(t.colptr, t.row, weight.index_select(0, t.perm), g2).view_as(x);
    at::Tensor value_grad_out;
    if (value_grad) {
      value_grad_out = (g2.index_select(0, t.row_of_edge) * x2.index_select(0, col)).sum(1);
      if (scale.defined()) value_grad_out = value_grad_out * scale;
    }
    return {x_grad, value_grad_out};
  }
}

template <typename Policy>
class SpmmFunction : public torch::autograd::Function<SpmmFunction<Policy>> {
 public:
  // `value` is an empty placeholder when not `weighted` (Function::apply
  // takes no undefined tensor).
  static variable_list forward(AutogradContext* ctx, const Variable& rowptr, const Variable& col,
                               const Variable& value, const Variable& x, bool weighted) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const std::optional<at::Tensor> weights = weighted ? std::optional<at::Tensor>(value) : std::nullopt;
    auto result = call_spmm<Policy>(rowptr, col, weights, x);
    if constexpr (Policy::kHasArg) {
      const auto& [out, arg] = result;
      ctx->mark_non_differentiable({arg});
      ctx->save_for_backward({rowptr, col, weighted ? value : at::Tensor(), x, arg});
      return {out, arg};
    } else {
      ctx->save_for_backward({rowptr, col, weighted ? value : at::Tensor(), x, at::Tensor()});
      return {result};
    }
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool value_grad = s[2].defined() && ctx->needs_input_grad(2);
    auto [x_grad, value_grad_out] = gradients<Policy>(s[0], s[1], s[2], s[3], s[4], grads[0], value_grad);
    return {Variable(), Variable(), value_grad_out, x_grad, Variable()};
  }
};

template <typename Policy>
Result<Policy> spmm_autograd(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                             const at::Tensor& x) {
  constexpr const char* op = kOpName<Policy>;
  const at::Tensor weights = value.has_value() ? *value : at::empty({0}, x.options());
  core::check_autograd_support(op, {TORCHPLUG_ARG(x), {"value", &weights}});
  if (!core::records_grad(x, weights)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_spmm<Policy>(rowptr, col, value, x);
  }
  auto outputs = SpmmFunction<Policy>::apply(rowptr, col, weights, x, value.has_value());
  if constexpr (Policy::kHasArg) {
    return {outputs[0], outputs[1]};
  } else {
    return outputs[0];
  }
}

}  // namespace
}  // namespace torchplug::spmm_detail

TORCH_LIBRARY_IMPL(torchplug, Autograd, m) {
#define TORCHPLUG_AUTOGRAD(name, Policy) m.impl("spmm_" #name, &torchplug::spmm_detail::spmm_autograd<Policy>);
  TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_AUTOGRAD)
#undef TORCHPLUG_AUTOGRAD
}
