#pragma once

// Sparse-dense matrix products with a reduction (torch_sparse's spmm): for a
// CSR adjacency A (rowptr, col, value) of M rows and a dense x,
//   out[r] = reduce over the edges k of row r of value[k] * x[col[k]]
// by sum, mean (over the row's degree), min or max. Message passing without
// materialising the E x F messages.
//
//   rowptr  int64 [M + 1], starting at 0, never decreasing, ending at nnz
//   col     int64 [nnz], values in [0, N)
//   value   x's dtype [nnz], or none (every edge weighs 1); or [nnz, H], one
//           weight per head, for x [N, H, *] (multi-head attention):
//             out[r, h] = reduce over k of value[k, h] * x[col[k], h]
//   x       [N, *]: float16, bfloat16 (computed in float32), float32, float64
// The output is [M, *]; an empty row holds 0. rowptr and col are checked on
// the CPU and, on CUDA, in checked mode (torchplug.set_checks); outside it a
// malformed rowptr is clamped and an edge whose col lies outside [0, N) is
// left out. Differentiable in x and value (double backward too).
//
// x's gradient is a product with the transposed adjacency, which backward
// builds every call unless the caller passes the one spmm_transpose built
// (`transpose`): its shapes are checked always, its index ranges on the CPU
// and in checked mode; that it is the transpose of (rowptr, col) is the
// caller's promise.

#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>
#include <tuple>

namespace torchplug {

// The CSR's transpose (CSC) for num_cols columns, built on the device:
//   colptr  int64 [num_cols + 1]  where each column's edges start
//   row     int64 [nnz]           each transposed edge's row
//   perm    int64 [nnz]           each transposed edge's position in the CSR
// The edges of a column come in increasing CSR position (deterministic, no
// atomics). An edge whose col lies outside [0, num_cols) (possible only on
// CUDA outside checked mode) is placed after colptr[num_cols], in no column.
struct SpmmTranspose {
  at::Tensor colptr, row, perm;
};
SpmmTranspose spmm_transpose(const at::Tensor& rowptr, const at::Tensor& col, int64_t num_cols);

at::Tensor spmm_sum(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                    const at::Tensor& x, const std::optional<SpmmTranspose>& transpose = std::nullopt);
at::Tensor spmm_mean(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                     const at::Tensor& x, const std::optional<SpmmTranspose>& transpose = std::nullopt);
// (values, arg): arg [M, *] int64 holds the edge k whose message is the
// result, the first in the row when several are; nnz for an empty row. Their
// gradients need no transpose: one given is checked and left unused.
std::tuple<at::Tensor, at::Tensor> spmm_min(const at::Tensor& rowptr, const at::Tensor& col,
                                            const std::optional<at::Tensor>& value, const at::Tensor& x,
                                            const std::optional<SpmmTranspose>& transpose = std::nullopt);
std::tuple<at::Tensor, at::Tensor> spmm_max(const at::Tensor& rowptr, const at::Tensor& col,
                                            const std::optional<at::Tensor>& value, const at::Tensor& x,
                                            const std::optional<SpmmTranspose>& transpose = std::nullopt);

// Any of them by name: "sum" (or "add"), "mean", "min", "max"; min and max give their values only.
at::Tensor spmm(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                const at::Tensor& x, std::string_view reduce = "sum",
                const std::optional<SpmmTranspose>& transpose = std::nullopt);

// The sampled dense-dense product over the CSR's edges (value's gradient of
// spmm_sum, or with `mean` of spmm_mean):
//   out[k] = a[row(k)] . b[col(k)]   (over the row's edge count when mean)
// a [M, *] and b [N, *] of one dtype and the same trailing shape; out [nnz]
// of their dtype, summed in float32 for float16 and bfloat16. With heads = H
// (a [M, H, *], b [N, H, *]) one product per head: out [nnz, H],
//   out[k, h] = a[row(k), h] . b[col(k), h]
// (the value gradient of a multi-head spmm; attention's q . k scores). An
// edge whose col lies outside [0, N) (unchecked CUDA) gets 0. Differentiable
// in a and b; b's gradient runs over the transpose, built unless given.
at::Tensor sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                 bool mean = false, const std::optional<SpmmTranspose>& transpose = std::nullopt,
                 int64_t heads = 1);

}  // namespace torchplug
