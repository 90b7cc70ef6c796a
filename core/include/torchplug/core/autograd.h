#pragma once

// For the ops' Autograd kernels. With nothing to record they call the op below
// autograd directly, as PyTorch's own ops do: Function::apply builds its node
// and context either way, a large part of a small call's host time.
//
// The usual kernel is one line: autograd_kernel<Function>(op) wraps a
// torch::autograd::Function whose forward takes the op's arguments,
//
//   TORCHPLUG_LIBRARY_IMPL(myplug, Autograd, m) {
//     m.impl("scale_add", torchplug::core::autograd_kernel<ScaleAddFunction>("myplug::scale_add"));
//   }
//
// and ops with more to do (an in-place op bumping its output's version) call
// check_autograd_support and records_grad themselves.

#include "torchplug/core/checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace torchplug::core {

// Refuses, on either path and before anything is written, what no op here
// supports: functorch's grad and jvp transforms (Function::apply's own check;
// vmap's fallback calls the op per sample, outside its layer, and passes) and
// forward-mode AD (an input carrying a tangent).
void check_autograd_support(const char* op, c10::ArrayRef<NamedTensor> inputs);
inline void check_autograd_support(const char* op, std::initializer_list<NamedTensor> inputs) {
  check_autograd_support(op, c10::ArrayRef<NamedTensor>(inputs));
}

// Whether autograd records a node: grad mode is on and an input requires grad.
// Pass every differentiable input, the one written in place included.
template <typename... Tensors>
bool records_grad(const Tensors&... inputs) {
  return c10::GradMode::is_enabled() && (inputs.requires_grad() || ...);
}

namespace autograd_detail {

// Each tensor argument (an optional one when present) named as the schema names it.
template <typename Arg>
void collect(std::vector<NamedTensor>& tensors, const c10::FunctionSchema& schema, size_t i,
             const Arg& arg) {
  using T = std::decay_t<Arg>;
  if constexpr (std::is_same_v<T, at::Tensor>) {
    tensors.emplace_back(schema.arguments()[i].name().c_str(), &arg);
  } else if constexpr (std::is_same_v<T, std::optional<at::Tensor>>) {
    if (arg.has_value()) tensors.emplace_back(schema.arguments()[i].name().c_str(), &*arg);
  }
}

template <typename Function, typename Signature>
class AutogradKernel;

template <typename Function, typename Result, typename... Args>
class AutogradKernel<Function, Result(Args...)> {
 public:
  explicit AutogradKernel(std::string op) : op_(std::move(op)) {}

  Result operator()(Args... args) const {
    const auto& handle = this->handle();
    std::vector<NamedTensor> tensors;
    size_t i = 0;
    (collect(tensors, handle.schema(), i++, args), ...);
    check_autograd_support(op_.c_str(), tensors);
    const bool record = c10::GradMode::is_enabled() &&
                        std::any_of(tensors.begin(), tensors.end(),
                                    [](const NamedTensor& t) { return t.second->requires_grad(); });
    if (!record) {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      return handle.template typed<Result(Args...)>().call(args...);
    }
    return Function::apply(args...);
  }

 private:
  const c10::OperatorHandle& handle() const {
    // Found on first call: the op's definition may register after this kernel.
    static const auto handle = [&] {
      const auto dot = op_.find('.');
      return c10::Dispatcher::singleton().findSchemaOrThrow(
          op_.substr(0, dot).c_str(), dot == std::string::npos ? "" : op_.substr(dot + 1).c_str());
    }();
    return handle;
  }

  std::string op_;
};

template <typename Forward>
struct ForwardSignature;
template <typename Result, typename... Args>
struct ForwardSignature<Result (*)(torch::autograd::AutogradContext*, Args...)> {
  using type = Result(Args...);
};

}  // namespace autograd_detail

// The Autograd kernel of op "ns::name" from a torch::autograd::Function whose
// static forward(ctx, args...) takes the op's arguments as the dispatcher
// passes them (const at::Tensor&, double, int64_t, ...). `Function` serves one op.
template <typename Function>
auto autograd_kernel(std::string op) {
  using Signature = typename autograd_detail::ForwardSignature<decltype(&Function::forward)>::type;
  return autograd_detail::AutogradKernel<Function, Signature>(std::move(op));
}

}  // namespace torchplug::core
