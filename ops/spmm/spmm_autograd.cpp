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

#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/autograd.h>
#include "torchplug/core/library.h"

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
// position. row_of_edge: each CSR edge's row. Sizes stay symbolic, so that
// torch.compile(dynamic=True) traces backward once for every graph size.
struct Transpose {
  at::Tensor colptr, row, perm, row_of_edge;
};

at::Tensor rows_of_edges(const at::Tensor& rowptr, const c10::SymInt& nnz) {
  const auto M = rowptr.sym_size(0) - 1;
  const auto degrees = rowptr.narrow_symint(0, 1, M) - rowptr.narrow_symint(0, 0, M);
  return at::repeat_interleave_symint(degrees, std::optional<c10::SymInt>(nnz));
}

Transpose transpose(const at::Tensor& rowptr, const at::Tensor& col, const c10::SymInt& N) {
  Transpose t;
  t.row_of_edge = rows_of_edges(rowptr, col.sym_size(0));
  const auto [sorted, perm] = col.sort(/*stable=*/true, 0, false);
  t.perm = perm;
  t.row = t.row_of_edge.index_select(0, perm);
  t.colptr = at::searchsorted(sorted, at::arange(N + 1, col.options()));
  return t;
}

// x's gradient and value's (each undefined where not wanted) for output
// gradient g, computed in the math type (a float16 degree or weight sum is
// inf past 65504). An edge whose col lies outside [0, N), which the CUDA
// kernels skip outside checked mode, gets no gradient and sends none.
template <typename Policy>
std::pair<at::Tensor, at::Tensor> gradients(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value,
                                            const at::Tensor& x, const at::Tensor& arg, const at::Tensor& g,
                                            bool x_grad_wanted, bool value_grad_wanted) {
  const auto M = rowptr.sym_size(0) - 1;
  const auto N = x.sym_size(0);
  const auto nnz = col.sym_size(0);
  c10::SymInt F = 1;
  for (const auto& size : x.sym_sizes().slice(1)) F = F * size;
  if (nnz == 0) {  // no message reached any row
    return {x_grad_wanted ? at::zeros_like(x) : at::Tensor(),
            value_grad_wanted ? at::zeros_symint({0}, x.options()) : at::Tensor()};
  }
  const auto math = at::toOpMathType(x.scalar_type());
  const auto x2 = x.reshape_symint({N, F}).to(math);
  const auto g2 = g.reshape_symint({M, F}).to(math);
  const auto inside = col.ge(0).logical_and_(col.lt(N));
  const auto safe_col = at::where(inside, col, 0);
  const auto weight = at::where(inside, value.defined() ? value.to(math) : at::ones_like(col, x2.options()), 0);
  at::Tensor x_grad, value_grad;
  if constexpr (Policy::kHasArg) {
    const auto edges = arg.reshape_symint({M, F});
    const auto k = at::where(edges.lt(nnz), edges, 0);
    const auto flat = k.reshape(-1);
    const auto held = edges.lt(nnz).logical_and_(inside.index_select(0, flat).view_as(k));
    const auto c = safe_col.index_select(0, flat).view_as(k);
    if (x_grad_wanted) {
      const auto w = weight.index_select(0, flat).view_as(k);
      x_grad = at::zeros_like(x2).scatter_add(0, c, at::where(held, g2 * w, 0));
    }
    if (value_grad_wanted) {
      value_grad = at::zeros_symint({nnz}, x2.options()).index_add(0, flat, at::where(held, g2 * x2.gather(0, c), 0)
                                                                                .reshape(-1));
    }
  } else {
    at::Tensor scale;  // mean: 1 / deg(row) per edge
    if constexpr (Policy::kDividesByCount) {
      const auto degrees = (rowptr.narrow_symint(0, 1, M) - rowptr.narrow_symint(0, 0, M)).clamp_min(1).to(math);
      scale = degrees.reciprocal().index_select(0, rows_of_edges(rowptr, nnz));
    }
    if (x_grad_wanted) {
      const Transpose t = transpose(rowptr, safe_col, N);
      const auto w = scale.defined() ? weight * scale : weight;
      x_grad = call_spmm<SumPolicy>(t.colptr, t.row, w.index_select(0, t.perm), g2);
    }
    if (value_grad_wanted) {
      const auto messages = g2.index_select(0, rows_of_edges(rowptr, nnz)) * x2.index_select(0, safe_col);
      value_grad = at::where(inside, messages.sum(1), 0);
      if (scale.defined()) value_grad = value_grad * scale;
    }
  }
  if (x_grad.defined()) x_grad = x_grad.to(x.scalar_type()).view_symint(x.sym_sizes());
  if (value_grad.defined()) value_grad = value_grad.to(x.scalar_type());
  return {x_grad, value_grad};
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
    auto [x_grad, value_grad_out] =
        gradients<Policy>(s[0], s[1], s[2], s[3], s[4], grads[0], ctx->needs_input_grad(3), value_grad);
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

TORCHPLUG_LIBRARY_IMPL(torchplug, Autograd, m) {
#define TORCHPLUG_AUTOGRAD(name, Policy) m.impl("spmm_" #name, &torchplug::spmm_detail::spmm_autograd<Policy>);
  TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_AUTOGRAD)
#undef TORCHPLUG_AUTOGRAD
}
