// my_plugin::scale(x, factor) = x * factor: one op with its CPU and Meta kernels, autograd and
// C++ API. Copy the folder to start a plugin; rename the namespace, the op and the library.
#include <torchplug/core/autograd.h>
#include <torchplug/core/library.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty_like.h>

namespace my_plugin {

// Declared once: the schema, the dtypes its kernels take (the checks read this
// list, and torchplug.registry() reports it) and one line for the docs.
const torchplug::core::OpDef kScale{"my_plugin::scale(Tensor x, float factor) -> Tensor",
                                    {at::kFloat, at::kDouble}, "x * factor, elementwise."};

// The C++ API: through the dispatcher, so autograd and every backend apply.
at::Tensor scale(const at::Tensor& x, double factor) {
  static const auto op = torchplug::core::find_op<at::Tensor(const at::Tensor&, double)>(kScale);
  return op.call(x, factor);
}

at::Tensor scale_meta(const at::Tensor& x, double /*factor*/) {
  kScale.check_dtypes({TORCHPLUG_ARG(x)});
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}

at::Tensor scale_cpu(const at::Tensor& x, double factor) {
  auto out = scale_meta(x, factor);
  const auto in = x.contiguous();
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "my_plugin::scale", [&] {
    const auto* src = in.const_data_ptr<scalar_t>();
    auto* dst = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, in.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = src[i] * static_cast<scalar_t>(factor);
    });
  });
  return out;
}

// d(x * factor)/dx = factor; factor gets no gradient.
struct ScaleFunction : torch::autograd::Function<ScaleFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double factor) {
    ctx->saved_data["factor"] = factor;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return scale(x, factor);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {scale(grads[0], ctx->saved_data["factor"].toDouble()), {}};
  }
};

}  // namespace my_plugin

TORCHPLUG_LIBRARY(my_plugin, m) { m.define(my_plugin::kScale); }
TORCHPLUG_LIBRARY_IMPL(my_plugin, CPU, m) { m.impl("scale", &my_plugin::scale_cpu); }
TORCHPLUG_LIBRARY_IMPL(my_plugin, Meta, m) { m.impl("scale", &my_plugin::scale_meta); }
TORCHPLUG_LIBRARY_IMPL(my_plugin, Autograd, m) {
  m.impl("scale", torchplug::core::autograd_kernel<my_plugin::ScaleFunction>(my_plugin::kScale));
}
