// torchplug::add autograd: d(a + b)/da = d(a + b)/db = 1, so each input's
// gradient is grad_out summed over the dimensions broadcasting added and cast
// back to that input's dtype. Built from differentiable ops: double backward works.

#include "add.h"
#include "add_kernel.h"
#include "torchplug/core/autograd.h"

#include <ATen/ExpandUtils.h>
#include <torch/autograd.h>
#include "torchplug/core/library.h"

#include <torch/library.h>

namespace torchplug::add_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

at::Tensor reduce_to(const at::Tensor& grad, const c10::IValue& sizes, const c10::IValue& dtype) {
  return at::sum_to(grad, sizes.toSymIntVector()).to(dtype.toScalarType());
}

class AddFunction : public torch::autograd::Function<AddFunction> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& a, const Variable& b) {
    ctx->saved_data["a_sizes"] = a.sym_sizes();
    ctx->saved_data["b_sizes"] = b.sym_sizes();
    ctx->saved_data["a_dtype"] = a.scalar_type();
    ctx->saved_data["b_dtype"] = b.scalar_type();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return torchplug::add(a, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto& grad = grad_outputs[0];
    Variable grad_a, grad_b;
    if (ctx->needs_input_grad(0)) {
      grad_a = reduce_to(grad, ctx->saved_data["a_sizes"], ctx->saved_data["a_dtype"]);
    }
    if (ctx->needs_input_grad(1)) {
      grad_b = reduce_to(grad, ctx->saved_data["b_sizes"], ctx->saved_data["b_dtype"]);
    }
    return {grad_a, grad_b};
  }
};

at::Tensor add_autograd(const at::Tensor& a, const at::Tensor& b) {
  core::check_autograd_support(kOp, {TORCHPLUG_ARG(a), TORCHPLUG_ARG(b)});
  if (!core::records_grad(a, b)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return torchplug::add(a, b);
  }
  return AddFunction::apply(a, b);
}

}  // namespace
}  // namespace torchplug::add_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, Autograd, m) {
  m.impl("add", &torchplug::add_detail::add_autograd);
}
