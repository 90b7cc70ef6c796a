#include "torchplug/core/broadcast.h"

#include <c10/util/Exception.h>

namespace torchplug::core {

int64_t normalize_dim(const char* op, int64_t dim, int64_t ndim) {
  const int64_t rank = std::max<int64_t>(ndim, 1);
  TORCH_CHECK_INDEX(dim >= -rank && dim < rank, op, ": argument 'dim' is ", dim,
                    ", out of range for a tensor of ", ndim, " dimensions (expected in [", -rank,
                    ", ", rank - 1, "])");
  return dim < 0 ? dim + rank : dim;
}

at::Tensor broadcast(const char* op, const at::Tensor& index, const at::Tensor& src, int64_t dim) {
  return broadcast(op, index, src.sym_sizes(), dim);
}

at::Tensor broadcast(const char* op, const at::Tensor& index, c10::SymIntArrayRef src_sizes,
                     int64_t dim) {
  // Symbolic sizes throughout: this runs under torch.compile with dynamic shapes.
  const int64_t ndim = static_cast<int64_t>(src_sizes.size());
  TORCH_CHECK(ndim > 0, op, ": argument 'src' must have at least one dimension");
  TORCH_CHECK(index.dim() <= ndim, op, ": argument 'index' has ", index.dim(),
              " dimensions, more than src's ", ndim);
  at::Tensor view = index;
  if (view.dim() <= 1 && ndim > 1) {
    std::vector<c10::SymInt> shape(dim + 1, 1);
    shape[dim] = index.sym_numel();
    view = view.view_symint(shape);
  }
  while (view.dim() < ndim) view = view.unsqueeze(-1);
  for (int64_t d = 0; d < ndim; ++d) {
    TORCH_CHECK(view.sym_size(d) == src_sizes[d] || view.sym_size(d) == 1, op,
                ": argument 'index' of shape ", index.sym_sizes(), " cannot be broadcast to src of shape ",
                src_sizes, " along dim ", dim, " (size ", view.sym_size(d), " against ",
                src_sizes[d], " at dimension ", d, ")");
  }
  return view.expand_symint(src_sizes);
}

bool varies_only_along(const at::Tensor& broadcast_index, int64_t dim) {
  for (int64_t d = 0; d < broadcast_index.dim(); ++d) {
    if (d != dim && broadcast_index.size(d) > 1 && broadcast_index.stride(d) != 0) return false;
  }
  return true;
}

DimSplit split_at(at::IntArrayRef sizes, int64_t dim) {
  DimSplit split{1, sizes.empty() ? 1 : sizes[dim], 1};
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d < dim) split.outer *= sizes[d];
    if (d > dim) split.inner *= sizes[d];
  }
  return split;
}

std::vector<int64_t> sizes_with(at::IntArrayRef sizes, int64_t dim, int64_t size) {
  std::vector<int64_t> out(sizes.begin(), sizes.end());
  if (out.empty()) return {size};
  out[dim] = size;
  return out;
}

}  // namespace torchplug::core
