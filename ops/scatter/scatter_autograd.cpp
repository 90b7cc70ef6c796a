// torchplug::scatter_sum autograd. Each src element lands in one output slot,
// so d(out)/d(src) picks that slot: the src gradient is grad_out gathered along
// dim with the broadcast index. gather is differentiable, so double backward
// works. The in-place form passes grad_out through to out unchanged.

#include "scatter.h"

#include "scatter_kernel.h"
#include "torchplug/core/broadcast.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/gather.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace torchplug::scatter_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

at::Tensor gather_grad(AutogradContext* ctx, const at::Tensor& grad) {
  const auto index = ctx->get_saved_variables()[0];
  return at::gather(grad, ctx->saved_data["dim"].toInt(), index);
}

// The broadcast index as a view, saved for backward: no copy of the index.
at::Tensor expanded_index(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index,
                          int64_t dim) {
  dim = core::normalize_dim(kOp, dim, src.dim());
  ctx->saved_data["dim"] = dim;
  return core::broadcast(kOp, index, src, dim);
}

class ScatterSumFunction : public torch::autograd::Function<ScatterSumFunction> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& src, const Variable& index,
                          int64_t dim, std::optional<c10::SymInt> dim_size) {
    ctx->save_for_backward({expanded_index(ctx, src, index, dim)});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("torchplug::scatter_sum", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                           std::optional<c10::SymInt>)>();
    return op.call(src, index, dim, std::move(dim_size));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return {gather_grad(ctx, grad_outputs[0]), Variable(), Variable(), Variable()};
  }
};

class ScatterSumInplaceFunction : public torch::autograd::Function<ScatterSumInplaceFunction> {
 public:
  static Variable forward(AutogradContext* ctx, Variable out, const Variable& src,
                          const Variable& index, int64_t dim) {
    ctx->save_for_backward({expanded_index(ctx, src, index, dim)});
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      static auto op =
          c10::Dispatcher::singleton()
              .findSchemaOrThrow("torchplug::scatter_sum_", "")
              .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
      op.call(out, src, index, dim);
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
  // The returned tensor is out itself; mark_dirty has already rebased its history.
  ScatterSumInplaceFunction::apply(out, src, index, dim);
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, Autograd, m) {
  m.impl("scatter_sum", &torchplug::scatter_detail::scatter_sum_autograd);
  m.impl("scatter_sum_", &torchplug::scatter_detail::scatter_sum_inplace_autograd);
}
