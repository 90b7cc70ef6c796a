#pragma once

// What the kernels of example::segment_l2norm share (not installed): the op's
// declaration and its body, around a device's segment sum from torchplug's
// reduction layer (<torchplug/core/reduce/...>, installed with the SDK).

#include <torchplug/core/reduce/problem.h>
#include <torchplug/core/registry.h>

#include <ATen/core/Tensor.h>

namespace example::detail {

// Inline, so that the registration blocks of every file may use it.
inline const torchplug::core::OpDef kSegmentL2Norm{
    "example::segment_l2norm(Tensor src, Tensor indptr) -> Tensor",
    {at::kFloat, at::kDouble},
    "out[i] = sqrt(sum of src[j]^2 over j in [indptr[i], indptr[i + 1])): the L2 norm of each segment."};

// The Meta kernel: checks dtypes, devices and shapes (never indptr's values)
// and allocates the output, [N, *] of src's dtype on src's device.
at::Tensor segment_l2norm_meta(const at::Tensor& src, const at::Tensor& indptr);

// A device's segment reduction of the layer, core::segment_kernel_cpu or
// core::segment_csr_kernel_cuda, for the sum.
using SegmentSum = void (*)(const torchplug::core::ScatterProblem&, const at::Tensor&);

// The op on src's device: checks (indptr's values where the device validates
// indices), src squared as the problem of segment_sum, the square root.
at::Tensor segment_l2norm_by(const at::Tensor& src, const at::Tensor& indptr, SegmentSum segment_sum);

}  // namespace example::detail
