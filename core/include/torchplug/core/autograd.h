#pragma once

// For the ops' Autograd kernels.

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

namespace torchplug::core {

// Whether autograd has work for these inputs: grad mode is on and one of them
// requires grad, or one carries a forward-mode tangent (level 0, the only level
// dual tensors use), which a C++ Function refuses with its own error rather
// than drop. When it has none, an Autograd kernel calls the op below autograd
// directly, as PyTorch's own ops do: Function::apply builds its node and
// context either way, a large part of a small call's host time.
template <typename... Tensors>
bool needs_autograd(const Tensors&... inputs) {
  return (c10::GradMode::is_enabled() && (inputs.requires_grad() || ...)) ||
         (inputs._fw_grad(/*level=*/0).defined() || ...);
}

}  // namespace torchplug::core
