#pragma once

// torchplug::scatter_sum: sums the slices of `src` into the slots of `out`
// that `index` names, along one dimension (torch_scatter semantics).

#include <ATen/core/Tensor.h>

#include <optional>

namespace torchplug {

// out[..., index[..., i, ...], ...] += src[..., i, ...] along `dim`.
//
//   src       any shape; float16, bfloat16, float32, float64, int32 or int64
//   index     int64; a 1-D tensor of length src.size(dim), or a tensor that
//             broadcasts to src's shape (trailing dimensions are added, size-1
//             dimensions expanded)
//   dim       the dimension of src to reduce; negative counts from the end
//   out       when given, the sums are added into it in place and it is
//             returned; its shape is src's except along dim
//   dim_size  out.size(dim) when out is not given; defaults to max(index) + 1
//             (0 for an empty index)
//
// Differentiable in src (and out); the gradient is a gather of grad_out.
at::Tensor scatter_sum(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                       const std::optional<at::Tensor>& out = std::nullopt,
                       std::optional<int64_t> dim_size = std::nullopt);

}  // namespace torchplug
