#pragma once

// torchplug::add: elementwise a + b.

#include <ATen/core/Tensor.h>

namespace torchplug {

// out = a + b, with PyTorch's broadcasting and type promotion. Supports
// float16, bfloat16, float32, float64 and the integer dtypes on CPU and CUDA;
// differentiable in both inputs (gradients are summed back to each input's
// shape). Goes through the dispatcher: works under autograd from C++.
at::Tensor add(const at::Tensor& a, const at::Tensor& b);

}  // namespace torchplug
