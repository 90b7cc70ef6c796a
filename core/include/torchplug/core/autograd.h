#pragma once

// For the ops' Autograd kernels.

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

namespace torchplug::core {

// Whether autograd records a node for these inputs: grad mode is on and one of
// them requires grad. When it does not, an Autograd kernel calls the op below
// autograd directly, as PyTorch's own ops do: Function::apply builds its node
// and context either way, a large part of a small call's host time.
template <typename... Tensors>
bool records_grad(const Tensors&... inputs) {
  return c10::GradMode::is_enabled() && (inputs.requires_grad() || ...);
}

}  // namespace torchplug::core
