#pragma once

// The scatter family: reduces the slices of `src` into the slots of `out` that
// `index` names, along one dimension (torch_scatter semantics), by sum, mean,
// product, minimum or maximum.

#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>
#include <tuple>

namespace torchplug {

// out[..., index[..., i, ...], ...] (op)= src[..., i, ...] along `dim`.
//
//   src       any shape; float16, bfloat16, float32, float64, int32 or int64
//             (float16 and bfloat16 reduce in float32 and round once)
//   index     int64; a 1-D tensor of length src.size(dim), or a tensor that
//             broadcasts to src's shape (trailing dimensions are added, size-1
//             dimensions expanded)
//   dim       the dimension of src to reduce; negative counts from the end
//   out       when given, reduced into in place (its values take part) and
//             returned; its shape is src's except along dim
//   dim_size  out.size(dim) when out is not given; defaults to max + 1 over the
//             index broadcast to src (0 when src or the index is empty)
//
// A slot no index entry names holds 0 (1 for mul), or keeps out's value.
// Differentiable in src and out (reverse mode).

// The sum; the src gradient is grad_out gathered along dim.
at::Tensor scatter_sum(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                       const std::optional<at::Tensor>& out = std::nullopt,
                       std::optional<int64_t> dim_size = std::nullopt);

// The sum over the count of entries in the slot (at least 1); integers floor-divide.
at::Tensor scatter_mean(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                        const std::optional<at::Tensor>& out = std::nullopt,
                        std::optional<int64_t> dim_size = std::nullopt);

// The product; the gradient is exact where a slot holds zeros.
at::Tensor scatter_mul(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                       const std::optional<at::Tensor>& out = std::nullopt,
                       std::optional<int64_t> dim_size = std::nullopt);

// (values, arg): the minimum or maximum of each slot (NaN wins), and arg, int64
// of the same shape, the smallest position along dim of a source holding it;
// src.size(dim) for an empty slot or one whose value is out's own. The gradient
// goes to the arg position alone.
std::tuple<at::Tensor, at::Tensor> scatter_min(const at::Tensor& src, const at::Tensor& index,
                                               int64_t dim = -1,
                                               const std::optional<at::Tensor>& out = std::nullopt,
                                               std::optional<int64_t> dim_size = std::nullopt);
std::tuple<at::Tensor, at::Tensor> scatter_max(const at::Tensor& src, const at::Tensor& index,
                                               int64_t dim = -1,
                                               const std::optional<at::Tensor>& out = std::nullopt,
                                               std::optional<int64_t> dim_size = std::nullopt);

// Any of them by name: "sum" (or "add"), "mean", "mul", "min", "max"; min and
// max give their values only. An unknown name raises c10::ValueError.
at::Tensor scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                   const std::optional<at::Tensor>& out = std::nullopt,
                   std::optional<int64_t> dim_size = std::nullopt, std::string_view reduce = "sum");

}  // namespace torchplug
