// torchplug::scatter_sum autograd. Each src element lands in one output slot,
// so d(out)/d(src) picks that slot: the src gradient is grad_out gathered along
// dim with the broadcast index. gather is differentiable, so double backward
// works. The in-place form passes grad_out through to out unchanged.
//
// CUDA kernels outside checked mode skip index values outside [0, N): those
// src elements get a zero gradient, and backward never gathers out of bounds.

#include "scatter_kernel.h"
#include "torchplug/core/autograd.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"

#include <ATen/ops/gather.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace torchplug::scatter_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// Saves what backward needs: the index as given (broadcast again in backward,
// as a view), src's shape, dim, and whether every index value was validated.
void save_index(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index, int64_t dim) {
  dim = core::normalize_dim(kOp, dim, src.dim());
  ctx->save_for_backward({index});
  ctx->saved_data["dim"] = dim;
  ctx->saved_data["src_sizes"] = src.sym_sizes();
  ctx->saved_data["validated"] = core::validates_indices(src.device());
}

at::Tensor gather_grad(AutogradContext* ctx, const at::Tensor& grad) {
  const auto index = ctx->get_saved_variables()[0];
  const int64_t dim = ctx->saved_data["dim"].toInt();
  const auto src_sizes = ctx->saved_data["src_sizes"].toSymIntVector();
  if (ctx->saved_data["validated"].toBool()) {
    return at::gather(grad, dim, core::broadcast(kOp, index, src_sizes, dim));
  }
  const auto size = grad.sym_size(dim);
  if (size == 0) return at::zeros_symint(src_sizes, grad.options());  // every value was skipped
  const auto inside = index.ge(0).logical_and_(index.lt(size));
  const auto safe = index.clamp(0, (size - 1).guard_int(__FILE__, __LINE__));
  const auto gathered = at::gather(grad, dim, core::broadcast(kOp, safe, src_sizes, dim));
  return at::where(core::broadcast(kOp, inside, src_sizes, dim), gathered, 0);
}

class ScatterSumFunction : public torch::autograd::Function<ScatterSumFunction> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& src, const Variable& index,
                          int64_t dim, std::optional<c10::SymInt> dim_size) {
    save_index(ctx, src, index, dim);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_scatter_sum(src, index, dim, std::move(dim_size));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return {gather_grad(ctx, grad_outputs[0]), Variable(), Variable(), Variable()};
  }
};

class ScatterSumInplaceFunction : public torch::autograd::Function<ScatterSumInplaceFunction> {
 public:
  static Variable forward(AutogradContext* ctx, Variable out, const Variable& src,
                          const Variable& index, int64_t dim) {
    save_index(ctx, src, index, dim);
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      call_scatter_sum_(out, src, index, dim);
    }
    ctx->mark_dirty({out});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto& grad = grad_outputs[0];
    return {grad, gather_grad(ctx, grad), Variable(), Variable()};
  }
};

at::Tensor scatter_sum_autograd(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                std::optional<c10::SymInt> dim_size) {
  core::check_autograd_support(kOp, {TORCHPLUG_ARG(src)});
  if (!core::records_grad(src)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_scatter_sum(src, index, dim, std::move(dim_size));
  }
  return ScatterSumFunction::apply(src, index, dim, std::move(dim_size));
}

// Refused before anything is written, as PyTorch's own in-place ops do.
void check_writable(const at::Tensor& out) {
  TORCH_CHECK(!(at::GradMode::is_enabled() && out.requires_grad() && out.is_leaf()), kOp,
              ": argument 'out' is a leaf tensor that requires grad and cannot be written in place");
}

void scatter_sum_inplace_autograd(const at::Tensor& out, const at::Tensor& src,
                                  const at::Tensor& index, int64_t dim) {
  check_writable(out);
  core::check_autograd_support(kOp, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src)});
  if (!core::records_grad(out, src)) {
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      call_scatter_sum_(out, src, index, dim);
    }
    // What mark_dirty does otherwise: autograd then refuses a backward through
    // an op that saved out's old values.
    torch::autograd::impl::bump_version(out);
    return;
  }
  // The returned tensor is out itself; mark_dirty has already rebased its history.
  ScatterSumInplaceFunction::apply(out, src, index, dim);
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, Autograd, m) {
  m.impl("scatter_sum", &torchplug::scatter_detail::scatter_sum_autograd);
  m.impl("scatter_sum_", &torchplug::scatter_detail::scatter_sum_inplace_autograd);
}
