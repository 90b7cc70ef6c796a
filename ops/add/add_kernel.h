#pragma once

// Internal to the add plugin: what the op entry hands its CPU and CUDA kernels.

#include <ATen/core/Tensor.h>

namespace torchplug::add_detail {

inline constexpr const char* kOp = "torchplug::add";

// Checks a and b, promotes both to the result dtype and allocates `out` of the
// broadcast shape on their device.
struct AddOperands {
  at::Tensor a;
  at::Tensor b;
  at::Tensor out;
};
AddOperands prepare(const at::Tensor& a, const at::Tensor& b);

void add_kernel_cpu(const AddOperands& operands);
void add_kernel_cuda(const AddOperands& operands);

}  // namespace torchplug::add_detail
