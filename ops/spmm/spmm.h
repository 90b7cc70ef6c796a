#pragma once

// Sparse-dense matrix products with a reduction (torch_sparse's spmm): for a
// CSR adjacency A (rowptr, col, value) of M rows and a dense x,
//   out[r] = reduce over the edges k of row r of value[k] * x[col[k]]
// by sum, mean (over the row's degree), min or max. Message passing without
// materialising the E x F messages.
//
//   rowptr  int64 [M + 1], starting at 0, never decreasing, ending at nnz
//   col     int64 [nnz], values in [0, N)
//   value   x's dtype [nnz], or none (every edge weighs 1)
//   x       [N, *]: float16, bfloat16 (computed in float32), float32, float64
// The output is [M, *]; an empty row holds 0. rowptr and col are checked on
// the CPU and, on CUDA, in checked mode (torchplug.set_checks); outside it a
// malformed rowptr is clamped and an edge whose col lies outside [0, N) is
// left out. Differentiable in x and value (double backward too).

#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>
#include <tuple>

namespace torchplug {

at::Tensor spmm_sum(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                    const at::Tensor& x);
at::Tensor spmm_mean(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                     const at::Tensor& x);
// (values, arg): arg [M, *] int64 holds the edge k whose message is the
// result, the first in the row when several are; nnz for an empty row.
std::tuple<at::Tensor, at::Tensor> spmm_min(const at::Tensor& rowptr, const at::Tensor& col,
                                            const std::optional<at::Tensor>& value, const at::Tensor& x);
std::tuple<at::Tensor, at::Tensor> spmm_max(const at::Tensor& rowptr, const at::Tensor& col,
                                            const std::optional<at::Tensor>& value, const at::Tensor& x);

// Any of them by name: "sum" (or "add"), "mean", "min", "max"; min and max give their values only.
at::Tensor spmm(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                const at::Tensor& x, std::string_view reduce = "sum");

}  // namespace torchplug
