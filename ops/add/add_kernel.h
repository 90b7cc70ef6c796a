#pragma once

// Internal to the add plugin: what the op entry hands its CPU and CUDA kernels.

#include <ATen/core/Tensor.h>

namespace torchplug::add_detail {

inline constexpr const char* kOp = "torchplug::add";

// Checks a and b and allocates `out` of the broadcast shape and the result
// dtype on their device. a and b keep their own dtypes: the kernels convert
// each element to the result dtype as they read it, as PyTorch does.
struct AddOperands {
  at::Tensor a;
  at::Tensor b;
  at::Tensor out;
};
AddOperands prepare(const at::Tensor& a, const at::Tensor& b);

void add_kernel_cpu(const AddOperands& operands);
void add_kernel_cuda(const AddOperands& operands);

}  // namespace torchplug::add_detail
