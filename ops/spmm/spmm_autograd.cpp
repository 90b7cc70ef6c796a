// Autograd of spmm and sddmm, with g the output's gradient ([M, F]) and w
// the edge weights (value, or 1):
//   sum   x: A^T (w g), spmm_sum over the transpose (spmm_transpose's, or the
//         caller's: no atomics, the same bits every run); value: sddmm,
//         g[row(k)] . x[col(k)] in one kernel
//   mean  the same with w / deg(row), and sddmm over deg(row)
//   min, max  the gradient goes to the arg edge of each output element:
//         x[col(arg)] gets g w(arg), value(arg) gets g x[col(arg)]
//   sddmm(a, b)  a: spmm_<sum|mean>(rowptr, col, g, b); b: A^T as for x above,
//         with g as the weights and a as the output's gradient (per head:
//         g [nnz, H] weighs the heads of b [N, H, C] and a [M, H, C])
// A multi-head value [nnz, H] weighs x [N, H, C] head by head: the same
// kernels, its gradient a per-head sddmm.
// Every backward is built from differentiable ops (spmm_sum and sddmm among
// them), so double backward works; a transpose given to the forward op is
// handed to every op of its backward. Nothing synchronises with the host.

#include "spmm_kernel.h"
#include "torchplug/core/autograd.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/autograd.h>

namespace torchplug::spmm_detail {
namespace {

using core::MeanPolicy;
using core::SumPolicy;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// A transpose given to an op, or none: (colptr, row, perm).
struct Transpose {
  OptTensor colptr, row, perm;

  static Transpose given(const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& perm) {
    if (!colptr.defined()) return {};
    return {colptr, row, perm};
  }
  // This one, or spmm_transpose's for N columns.
  Transpose or_built(const at::Tensor& rowptr, const at::Tensor& col, const c10::SymInt& N) const {
    if (colptr.has_value()) return *this;
    auto [c, r, p] = call_transpose(rowptr, col, N);
    return {c, r, p};
  }
  std::vector<at::Tensor> saved() const {
    return {colptr.value_or(at::Tensor()), row.value_or(at::Tensor()), perm.value_or(at::Tensor())};
  }
};

// A^T (w g) for spmm_sum, or A^T (w / deg(row) g) for spmm_mean, as an
// spmm_sum over the transpose: x's gradient for output gradient g ([M, *])
// and weights w ([nnz], undefined for 1), of x's shape [N, *]. The transpose
// leaves out edges whose col lies outside [0, N), which unchecked CUDA
// skips. mean's weights are taken in the math type (a float16 1 / 70000 is
// subnormal), and so is g then.
template <typename Policy>
at::Tensor transposed_product(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& w,
                              const at::Tensor& g, const c10::SymInt& N, const Transpose& given) {
  const Transpose t = given.or_built(rowptr, col, N);
  // Per-head weights [nnz, H] gathered flat, value by value: index_select
  // (and gather) of rows of a few values took 3.3 ms for [5.5M, 8] on an
  // H100, a sixth of a GAT step.
  at::Tensor weights;
  if (w.defined() && w.dim() == 2) {
    const auto H = w.sym_size(1);
    const auto flat = (t.perm->unsqueeze(1) * H + at::arange(c10::Scalar(H), t.perm->options())).reshape(-1);
    weights = w.reshape(-1).index_select(0, flat).view_symint(w.sym_sizes());
  } else if (w.defined()) {
    weights = w.index_select(0, *t.perm);
  }
  at::Tensor grad = g;
  if constexpr (Policy::kDividesByCount) {
    const auto math = at::toOpMathType(g.scalar_type());
    const auto M = rowptr.sym_size(0) - 1;
    const auto degrees = (rowptr.narrow_symint(0, 1, M) - rowptr.narrow_symint(0, 0, M)).clamp_min(1).to(math);
    const auto scale = degrees.reciprocal().index_select(0, *t.row);
    weights = weights.defined() ? weights.to(math) * (weights.dim() == 2 ? scale.unsqueeze(-1) : scale) : scale;
    grad = g.to(math);
  }
  const std::optional<at::Tensor> value = weights.defined() ? std::optional<at::Tensor>(weights) : std::nullopt;
  return call_spmm<SumPolicy>(*t.colptr, *t.row, value, grad, std::nullopt, std::nullopt, std::nullopt)
      .to(g.scalar_type());
}

// The head of each of F = H * C columns: [F] int64, f / C.
at::Tensor head_of_columns(const c10::SymInt& F, const c10::SymInt& H, const at::TensorOptions& options) {
  return at::arange(c10::Scalar(F), options).div(H == 0 ? c10::SymInt(1) : F / H, "floor");
}

// x's gradient and value's (each undefined where not wanted) for output
// gradient g.
template <typename Policy>
std::pair<at::Tensor, at::Tensor> gradients(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value,
                                            const at::Tensor& x, const at::Tensor& arg, const at::Tensor& g,
                                            const Transpose& transpose, bool x_grad_wanted, bool value_grad_wanted) {
  at::Tensor x_grad, value_grad;
  if constexpr (Policy::kHasArg) {
    const auto M = rowptr.sym_size(0) - 1;
    const auto N = x.sym_size(0);
    const auto nnz = col.sym_size(0);
    if (nnz == 0) {  // no message reached any row
      return {x_grad_wanted ? at::zeros_like(x) : at::Tensor(),
              value_grad_wanted ? at::zeros_symint({0}, x.options()) : at::Tensor()};
    }
    c10::SymInt F = 1;
    for (const auto& size : x.sym_sizes().slice(1)) F = F * size;
    // In the math type; an edge whose col lies outside [0, N) (skipped on
    // unchecked CUDA) gets no gradient and sends none. Element f of a row
    // belongs to head f / C and takes its edge's weight (k, head): flat
    // position k * H + head of the [nnz, H] weights.
    const auto math = at::toOpMathType(x.scalar_type());
    const auto x2 = x.reshape_symint({N, F}).to(math);
    const auto g2 = g.reshape_symint({M, F}).to(math);
    const c10::SymInt H = value.defined() && value.dim() == 2 ? value.sym_size(1) : c10::SymInt(1);
    const auto inside = col.ge(0).logical_and_(col.lt(N));
    const auto safe_col = at::where(inside, col, 0);
    const auto weight = at::where(inside.unsqueeze(-1),
                                  value.defined() ? value.to(math).reshape_symint({nnz, H})
                                                  : at::ones_like(col, x2.options()).unsqueeze(-1),
                                  0)
                            .reshape(-1);
    const auto edges = arg.reshape_symint({M, F});
    const auto k = at::where(edges.lt(nnz), edges, 0);
    const auto flat = k.reshape(-1);
    const auto weight_at = H == 1 ? flat : (k * H + head_of_columns(F, H, col.options())).reshape(-1);
    const auto held = edges.lt(nnz).logical_and_(inside.index_select(0, flat).view_as(k));
    const auto c = safe_col.index_select(0, flat).view_as(k);
    if (x_grad_wanted) {
      const auto w = weight.index_select(0, weight_at).view_as(k);
      x_grad = at::zeros_like(x2).scatter_add(0, c, at::where(held, g2 * w, 0));
      x_grad = x_grad.to(x.scalar_type()).view_symint(x.sym_sizes());
    }
    if (value_grad_wanted) {
      value_grad = at::zeros_symint({nnz * H}, x2.options())
                       .index_add(0, weight_at, at::where(held, g2 * x2.gather(0, c), 0).reshape(-1));
      value_grad = value_grad.to(x.scalar_type()).view_symint(value.sym_sizes());
    }
  } else {
    if (x_grad_wanted) x_grad = transposed_product<Policy>(rowptr, col, value, g, x.sym_size(0), transpose);
    if (value_grad_wanted) {
      value_grad = call_sddmm(rowptr, col, g, x, Policy::kDividesByCount, transpose.colptr, transpose.row,
                              transpose.perm, value.dim() == 2 ? value.sym_size(1).guard_int(__FILE__, __LINE__) : 1)
                       .view_symint(value.sym_sizes());
    }
  }
  return {x_grad, value_grad};
}

template <typename Policy>
class SpmmFunction : public torch::autograd::Function<SpmmFunction<Policy>> {
 public:
  // `value` is an empty placeholder when not `weighted`.
  static variable_list forward(AutogradContext* ctx, const Variable& rowptr, const Variable& col,
                               const Variable& value, const Variable& x, bool weighted, const OptTensor& colptr,
                               const OptTensor& row, const OptTensor& perm) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const OptTensor weights = weighted ? OptTensor(value) : std::nullopt;
    auto result = call_spmm<Policy>(rowptr, col, weights, x, colptr, row, perm);
    const auto transpose = Transpose{colptr, row, perm}.saved();
    at::Tensor arg;
    if constexpr (Policy::kHasArg) {
      arg = std::get<1>(result);
      ctx->mark_non_differentiable({arg});
    }
    ctx->save_for_backward({rowptr, col, weighted ? value : at::Tensor(), x, arg, transpose[0], transpose[1],
                            transpose[2]});
    if constexpr (Policy::kHasArg) {
      return {std::get<0>(result), arg};
    } else {
      return {result};
    }
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool value_grad = s[2].defined() && ctx->needs_input_grad(2);
    auto [x_grad, value_grad_out] = gradients<Policy>(s[0], s[1], s[2], s[3], s[4], grads[0],
                                                      Transpose::given(s[5], s[6], s[7]), ctx->needs_input_grad(3),
                                                      value_grad);
    return {Variable(), Variable(), value_grad_out, x_grad, Variable(), Variable(), Variable(), Variable()};
  }
};

template <typename Policy>
Result<Policy> spmm_autograd(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                             const at::Tensor& x, const OptTensor& colptr, const OptTensor& row,
                             const OptTensor& perm) {
  const char* op = kSpmm.of<Policy>().name().c_str();
  const at::Tensor weights = value.has_value() ? *value : at::empty({0}, x.options());
  core::check_autograd_support(op, {TORCHPLUG_ARG(x), {"value", &weights}});
  if (!core::records_grad(x, weights)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_spmm<Policy>(rowptr, col, value, x, colptr, row, perm);
  }
  auto outputs = SpmmFunction<Policy>::apply(rowptr, col, weights, x, value.has_value(), colptr, row, perm);
  if constexpr (Policy::kHasArg) {
    return {outputs[0], outputs[1]};
  } else {
    return outputs[0];
  }
}

class SddmmFunction : public torch::autograd::Function<SddmmFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& rowptr, const Variable& col, const Variable& a,
                               const Variable& b, bool mean, const OptTensor& colptr, const OptTensor& row,
                               const OptTensor& perm, int64_t heads) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto out = call_sddmm(rowptr, col, a, b, mean, colptr, row, perm, heads);
    const auto transpose = Transpose{colptr, row, perm}.saved();
    ctx->save_for_backward({rowptr, col, a, b, transpose[0], transpose[1], transpose[2]});
    ctx->saved_data["mean"] = mean;
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool mean = ctx->saved_data["mean"].toBool();
    const Transpose transpose = Transpose::given(s[4], s[5], s[6]);
    const at::Tensor& g = grads[0];
    at::Tensor a_grad, b_grad;
    if (ctx->needs_input_grad(2)) {
      a_grad = mean ? call_spmm<MeanPolicy>(s[0], s[1], g, s[3], transpose.colptr, transpose.row, transpose.perm)
                    : call_spmm<SumPolicy>(s[0], s[1], g, s[3], transpose.colptr, transpose.row, transpose.perm);
    }
    if (ctx->needs_input_grad(3)) {
      b_grad = mean ? transposed_product<MeanPolicy>(s[0], s[1], g, s[2], s[3].sym_size(0), transpose)
                    : transposed_product<SumPolicy>(s[0], s[1], g, s[2], s[3].sym_size(0), transpose);
    }
    return {Variable(), Variable(), a_grad, b_grad, Variable(), Variable(), Variable(), Variable(), Variable()};
  }
};

}  // namespace
}  // namespace torchplug::spmm_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, Autograd, m) {
  using namespace torchplug::spmm_detail;
  SpmmOps::for_each([&](auto policy) { m.impl(kSpmm.of<decltype(policy)>(), &spmm_autograd<decltype(policy)>); });
  m.impl(kSddmm, torchplug::core::autograd_kernel<SddmmFunction, at::Tensor>(kSddmm));
}
