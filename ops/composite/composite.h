#pragma once

// The composites of the scatter family (torch_scatter's composite module),
// each one fused op: per-row softmax, log_softmax, logsumexp and standard
// deviation over the slices of `src` that `index` groups along `dim`, and
// softmax over the sorted groups of an `indptr`.
//
//   src       any shape with at least one dimension; float16, bfloat16 (both
//             computed in float32), float32 or float64
//   index     int64; [src.size(dim)], or a tensor that broadcasts to src's
//             shape (trailing dimensions added, size-1 dimensions expanded)
//   dim       the dimension of src the groups run along; negative counts from the end
//   dim_size  the number of groups N; by default max(index) + 1
//
// Index values must lie in [0, N): checked on the CPU and, on CUDA, in checked
// mode (torchplug.set_checks); outside it a source with a bad value is left
// out of every group. All are differentiable in src (double backward too).

#include <ATen/core/Tensor.h>

#include <optional>

namespace torchplug {

// src's shape: exp(src - max) / sum(exp(src - max)) within each group. A group
// whose values are all -inf gives 0; a NaN makes its group NaN (torch.softmax's
// rule); a source whose index names no group gives 0.
at::Tensor scatter_softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                           std::optional<int64_t> dim_size = std::nullopt);

// src's shape: src - max - log(sum(exp(src - max))) within each group; -inf
// for an all -inf group and for a source in no group.
at::Tensor scatter_log_softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                               std::optional<int64_t> dim_size = std::nullopt);

// [*, N, *]: log(sum(exp(src))) of each group, computed stably. An empty
// group, or one of -inf alone, gives 0 (torch_scatter's value). With out,
// reduces into out in place, out's value taking part as one more source (an
// empty group keeps it), and returns it.
at::Tensor scatter_logsumexp(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                             const std::optional<at::Tensor>& out = std::nullopt,
                             std::optional<int64_t> dim_size = std::nullopt);

// [*, N, *]: the standard deviation of each group (Welford's form), over
// count - 1 (unbiased) or count, at least 1; an empty group gives 0. With
// out, the result is written into out and returned.
at::Tensor scatter_std(const at::Tensor& src, const at::Tensor& index, int64_t dim = -1,
                       const std::optional<at::Tensor>& out = std::nullopt,
                       std::optional<int64_t> dim_size = std::nullopt, bool unbiased = true);

// src's shape: the softmax of each group src[indptr[i] .. indptr[i + 1]) along
// dim. indptr is int64 [N + 1], starting at 0, never decreasing, ending at
// src.size(dim) (checked on the CPU and in checked mode).
at::Tensor softmax_csr(const at::Tensor& src, const at::Tensor& indptr, int64_t dim = 0);

}  // namespace torchplug
