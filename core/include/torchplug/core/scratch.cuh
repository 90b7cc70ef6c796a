#pragma once

// Scratch memory for the CUDA kernels: arrays that a kernel writes in full
// before anything reads them. at::empty fills new memory under
// torch.use_deterministic_algorithms (PyTorch's fill_uninitialized_memory),
// one E-sized pass per array; scratch takes the caching allocator's memory
// as it is.

#include <ATen/core/Tensor.h>
#include <ATen/cuda/EmptyTensor.h>

namespace torchplug::core {

inline at::Tensor scratch(at::IntArrayRef size, const at::TensorOptions& options) {
  return at::Tensor(at::detail::empty_cuda(size, options));
}

}  // namespace torchplug::core
