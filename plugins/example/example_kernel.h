#pragma once

// What the kernels of example::edge_dot share (not installed): the op's
// declaration, its checks and the inputs as the kernels read them.

#include <torchplug/core/registry.h>

#include <ATen/core/Tensor.h>

namespace example::detail {

constexpr char kOp[] = "example::edge_dot";
extern const torchplug::core::OpDef kEdgeDot;

// The Meta kernel: checks dtypes, devices and shapes (never the index values)
// and allocates the output, [E] of x's dtype on x's device.
at::Tensor edge_dot_meta(const at::Tensor& x, const at::Tensor& y, const at::Tensor& src, const at::Tensor& dst);

// The inputs as the CPU and CUDA kernels read them: x and y as rows of F
// values one after the other (any row stride: a column slice is not copied),
// src and dst contiguous and their values checked when the device validates
// indices (always on the CPU, in checked mode on CUDA).
struct EdgeDotInputs {
  at::Tensor x, y, src, dst, out;
  int64_t N, M, E, F;
};
EdgeDotInputs prepare(const at::Tensor& x, const at::Tensor& y, const at::Tensor& src, const at::Tensor& dst);

}  // namespace example::detail
