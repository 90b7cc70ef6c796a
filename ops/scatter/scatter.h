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

// ---- segments and gathers (torch_scatter's segment_csr, segment_coo, gather_*) ----
//
// segment_<r>_csr: out[..., i, ...] = the reduction of src[..., indptr[i] ..
// indptr[i + 1], ...] along dim = indptr.dim() - 1. indptr is int64 [..., N + 1],
// its leading sizes src's or 1, starting at 0, never decreasing, ending at most
// at src.size(dim) (checked on the CPU, and on CUDA in checked mode; outside it
// a malformed indptr never reads out of bounds). out, when given, is
// overwritten. An empty segment holds 0, its arg src.size(dim).
//
// segment_<r>_coo: scatter_<r> along dim = index.dim() - 1 with an index sorted
// along its last dimension (checked on the CPU and in checked mode; an unsorted
// index still reduces correctly outside it); out's values take part, as in
// scatter.
//
// gather_csr: out[..., j, ...] = src[..., i, ...] for indptr[i] <= j < indptr[i + 1]
// (0 past the last segment); out.size(dim) = indptr's last value by default.
// gather_coo: out[..., j, ...] = src[..., index[..., j], ...], any order.
// All differentiable in src, but for their out= forms.
// (values, arg) of the min and max forms.
using ValuesAndArg = std::tuple<at::Tensor, at::Tensor>;
at::Tensor segment_sum_csr(const at::Tensor& src, const at::Tensor& indptr,
                           const std::optional<at::Tensor>& out = std::nullopt);
at::Tensor segment_sum_coo(const at::Tensor& src, const at::Tensor& index,
                           const std::optional<at::Tensor>& out = std::nullopt,
                           std::optional<int64_t> dim_size = std::nullopt);
at::Tensor segment_mean_csr(const at::Tensor& src, const at::Tensor& indptr,
                            const std::optional<at::Tensor>& out = std::nullopt);
at::Tensor segment_mean_coo(const at::Tensor& src, const at::Tensor& index,
                            const std::optional<at::Tensor>& out = std::nullopt,
                            std::optional<int64_t> dim_size = std::nullopt);
at::Tensor segment_mul_csr(const at::Tensor& src, const at::Tensor& indptr,
                           const std::optional<at::Tensor>& out = std::nullopt);
at::Tensor segment_mul_coo(const at::Tensor& src, const at::Tensor& index,
                           const std::optional<at::Tensor>& out = std::nullopt,
                           std::optional<int64_t> dim_size = std::nullopt);
ValuesAndArg segment_min_csr(const at::Tensor& src, const at::Tensor& indptr,
                             const std::optional<at::Tensor>& out = std::nullopt);
ValuesAndArg segment_min_coo(const at::Tensor& src, const at::Tensor& index,
                             const std::optional<at::Tensor>& out = std::nullopt,
                             std::optional<int64_t> dim_size = std::nullopt);
ValuesAndArg segment_max_csr(const at::Tensor& src, const at::Tensor& indptr,
                             const std::optional<at::Tensor>& out = std::nullopt);
ValuesAndArg segment_max_coo(const at::Tensor& src, const at::Tensor& index,
                             const std::optional<at::Tensor>& out = std::nullopt,
                             std::optional<int64_t> dim_size = std::nullopt);

// Any of them by name, as scatter(); min and max give their values only.
at::Tensor segment_csr(const at::Tensor& src, const at::Tensor& indptr,
                       const std::optional<at::Tensor>& out = std::nullopt,
                       std::string_view reduce = "sum");
at::Tensor segment_coo(const at::Tensor& src, const at::Tensor& index,
                       const std::optional<at::Tensor>& out = std::nullopt,
                       std::optional<int64_t> dim_size = std::nullopt, std::string_view reduce = "sum");

// dim_size: the positions of out along dim when out is not given (indptr's
// last value by default; required under torch.compile's fake tensors).
at::Tensor gather_csr(const at::Tensor& src, const at::Tensor& indptr,
                      const std::optional<at::Tensor>& out = std::nullopt,
                      std::optional<int64_t> dim_size = std::nullopt);
at::Tensor gather_coo(const at::Tensor& src, const at::Tensor& index,
                      const std::optional<at::Tensor>& out = std::nullopt);

}  // namespace torchplug
