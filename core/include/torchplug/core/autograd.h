#pragma once

// For the ops' Autograd kernels. With nothing to record they call the op below
// autograd directly, as PyTorch's own ops do: Function::apply builds its node
// and context either way, a large part of a small call's host time.

#include "torchplug/core/checks.h"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <initializer_list>

namespace torchplug::core {

// Refuses, on either path and before anything is written, what no op here
// supports: functorch's grad and jvp transforms (Function::apply's own check;
// vmap's fallback calls the op per sample, outside its layer, and passes) and
// forward-mode AD (an input carrying a tangent).
void check_autograd_support(const char* op, std::initializer_list<NamedTensor> inputs);

// Whether autograd records a node: grad mode is on and an input requires grad.
// Pass every differentiable input, the one written in place included.
template <typename... Tensors>
bool records_grad(const Tensors&... inputs) {
  return c10::GradMode::is_enabled() && (inputs.requires_grad() || ...);
}

}  // namespace torchplug::core
