#pragma once

// For the ops' Autograd kernels. With nothing to record they call the op below
// autograd directly, as PyTorch's own ops do: Function::apply builds its node
// and context either way, a large part of a small call's host time.
//
// The usual kernel is one line: autograd_kernel<Function>(op) wraps a
// torch::autograd::Function whose forward takes the op's arguments,
//
//   TORCHPLUG_LIBRARY_IMPL(myplug, Autograd, m) {
//     m.impl("scale_add", torchplug::core::autograd_kernel<ScaleAddFunction>(kScaleAdd));
//   }
//
// and ops with more to do (an in-place op bumping its output's version) call
// check_autograd_support and records_grad themselves.

#include "torchplug/core/checks.h"
#include "torchplug/core/registry.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

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

template <typename T>
constexpr bool kIsTensor = std::is_same_v<std::decay_t<T>, at::Tensor> ||
                           std::is_same_v<std::decay_t<T>, std::optional<at::Tensor>>;
template <typename T>
constexpr bool kIsTensorList = std::is_same_v<std::decay_t<T>, at::TensorList> ||
                               std::is_same_v<std::decay_t<T>, c10::List<std::optional<at::Tensor>>>;

// Each tensor argument (an optional one when present) named as the schema names it.
template <typename Arg>
void collect(NamedTensor* tensors, size_t& count, const c10::FunctionSchema& schema, size_t i, const Arg& arg) {
  if constexpr (std::is_same_v<std::decay_t<Arg>, at::Tensor>) {
    tensors[count++] = {schema.arguments()[i].name().c_str(), &arg};
  } else if constexpr (std::is_same_v<std::decay_t<Arg>, std::optional<at::Tensor>>) {
    if (arg.has_value()) tensors[count++] = {schema.arguments()[i].name().c_str(), &*arg};
  }
}

// An op's result from a Function's variable_list: its first output, or its
// first two (an op returning (Tensor, Tensor), the second an arg).
template <typename Result>
Result as_result(const torch::autograd::variable_list& outputs);
template <>
inline at::Tensor as_result<at::Tensor>(const torch::autograd::variable_list& outputs) {
  return outputs[0];
}
template <>
inline std::tuple<at::Tensor, at::Tensor> as_result<std::tuple<at::Tensor, at::Tensor>>(
    const torch::autograd::variable_list& outputs) {
  return {outputs[0], outputs[1]};
}

template <typename Function, typename Signature>
class AutogradKernel;

template <typename Function, typename Result, typename... Args>
class AutogradKernel<Function, Result(Args...)> {
  static_assert(!(kIsTensorList<Args> || ...),
                "autograd_kernel: ops taking a list of tensors need an Autograd kernel of their own");

  // The op, found on first call: its definition may register after this kernel.
  struct Op {
    std::string name;
    std::once_flag found;
    std::optional<c10::TypedOperatorHandle<Result(Args...)>> handle;
  };

 public:
  explicit AutogradKernel(std::string op) : op_(std::make_shared<Op>()) { op_->name = std::move(op); }

  Result operator()(Args... args) const {
    const auto& handle = this->handle();
    std::array<NamedTensor, sizeof...(Args)> tensors;
    size_t count = 0, i = 0;
    (collect(tensors.data(), count, handle.schema(), i++, args), ...);
    const c10::ArrayRef<NamedTensor> inputs(tensors.data(), count);
    check_autograd_support(op_->name.c_str(), inputs);
    const bool record = c10::GradMode::is_enabled() &&
                        std::any_of(inputs.begin(), inputs.end(),
                                    [](const NamedTensor& t) { return t.second->requires_grad(); });
    if (!record) {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      return handle.call(args...);
    }
    if constexpr (std::is_same_v<decltype(Function::apply(args...)), Result>) {
      return Function::apply(args...);
    } else {
      return as_result<Result>(Function::apply(args...));
    }
  }

 private:
  const c10::TypedOperatorHandle<Result(Args...)>& handle() const {
    std::call_once(op_->found, [&] {
      const auto name = parse_operator_name(op_->name);
      op_->handle = c10::Dispatcher::singleton()
                        .findSchemaOrThrow(name.name.c_str(), name.overload_name.c_str())
                        .template typed<Result(Args...)>();
    });
    return *op_->handle;
  }

  std::shared_ptr<Op> op_;  // shared by the copies the dispatcher keeps
};

template <typename Forward>
struct ForwardSignature;
template <typename Result, typename... Args>
struct ForwardSignature<Result (*)(torch::autograd::AutogradContext*, Args...)> {
  using type = Result(Args...);
  template <typename OpResult>
  using returning = OpResult(Args...);
};

}  // namespace autograd_detail

// The Autograd kernel of `op` from a torch::autograd::Function whose static
// forward(ctx, args...) takes the op's arguments as the dispatcher passes them
// (const at::Tensor&, double, int64_t, ...).
//
// A forward returning a variable_list (an op with an arg output, or one whose
// outputs need mark_non_differentiable) names the op's result type:
//   autograd_kernel<MaxFunction, std::tuple<at::Tensor, at::Tensor>>(kMax)
template <typename Function, typename OpResult = void>
auto autograd_kernel(const OpDef& op) {
  using Forward = autograd_detail::ForwardSignature<decltype(&Function::forward)>;
  using Signature = std::conditional_t<std::is_void_v<OpResult>, typename Forward::type,
                                       typename Forward::template returning<OpResult>>;
  TORCH_CHECK(op.name().find("::") != std::string::npos,
              "torchplug: autograd_kernel needs a schema that names its namespace, got '", op.schema, "'");
  return autograd_detail::AutogradKernel<Function, Signature>(op.name());
}

}  // namespace torchplug::core
