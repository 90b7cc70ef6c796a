// torchplug::add: the op's definition, checks, Meta kernel, autograd and C++
// API. The kernels: add_cpu.cpp, add_cuda.cu.

#include "add.h"

#include "add_kernel.h"
#include "torchplug/core/autograd.h"
#include "torchplug/core/library.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>

namespace torchplug {
namespace add_detail {
namespace {

const core::OpDef kAdd{"torchplug::add(Tensor a, Tensor b) -> Tensor",
                       {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kByte, at::kChar,
                        at::kShort, at::kInt, at::kLong},
                       "Elementwise a + b with broadcasting and type promotion."};

c10::SymDimVector broadcast_shape(const at::Tensor& a, const at::Tensor& b) {
  const auto& sa = a.sym_sizes();
  const auto& sb = b.sym_sizes();
  for (size_t i = 0; i < std::min(sa.size(), sb.size()); ++i) {
    const auto& x = sa[sa.size() - 1 - i];
    const auto& y = sb[sb.size() - 1 - i];
    TORCH_CHECK(x == y || x == 1 || y == 1, kOp, ": arguments 'a' of shape ", sa, " and 'b' of shape ",
                sb, " cannot be broadcast together (dimension ", -1 - static_cast<int64_t>(i), ")");
  }
  return at::infer_size_symdimvector(sa, sb);
}

at::Tensor add_meta(const at::Tensor& a, const at::Tensor& b) {
  kAdd.check_dtypes({TORCHPLUG_ARG(a), TORCHPLUG_ARG(b)});
  return at::empty_symint(broadcast_shape(a, b), a.options().dtype(at::result_type(a, b)));
}

// d(a + b)/da = d(a + b)/db = 1: each input's gradient is grad_out summed over
// the dimensions broadcasting added, in that input's dtype. Built from
// differentiable ops, so double backward works.
class AddFunction : public torch::autograd::Function<AddFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->saved_data["a_sizes"] = a.sym_sizes();
    ctx->saved_data["b_sizes"] = b.sym_sizes();
    ctx->saved_data["a_dtype"] = a.scalar_type();
    ctx->saved_data["b_dtype"] = b.scalar_type();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return torchplug::add(a, b);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto reduce_to = [&](const char* sizes, const char* dtype) {
      return at::sum_to(grad_outputs[0], ctx->saved_data[sizes].toSymIntVector())
          .to(ctx->saved_data[dtype].toScalarType());
    };
    return {ctx->needs_input_grad(0) ? reduce_to("a_sizes", "a_dtype") : at::Tensor(),
            ctx->needs_input_grad(1) ? reduce_to("b_sizes", "b_dtype") : at::Tensor()};
  }
};

}  // namespace

AddOperands prepare(const at::Tensor& a, const at::Tensor& b) {
  core::check_same_device(kOp, {TORCHPLUG_ARG(a), TORCHPLUG_ARG(b)});
  auto out = add_meta(a, b);  // checks dtypes and shapes; allocates on a's device
  return {a, b, std::move(out)};
}

}  // namespace add_detail

at::Tensor add(const at::Tensor& a, const at::Tensor& b) {
  static const auto op = core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(add_detail::kAdd);
  return op.call(a, b);
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) { m.define(torchplug::add_detail::kAdd); }

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) { m.impl("add", &torchplug::add_detail::add_meta); }

TORCHPLUG_LIBRARY_IMPL(torchplug, Autograd, m) {
  using torchplug::add_detail::AddFunction;
  m.impl("add", torchplug::core::autograd_kernel<AddFunction>(torchplug::add_detail::kAdd));
}
