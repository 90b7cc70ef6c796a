#pragma once

// Shape helpers for ops that reduce along one dimension (scatter, segment, ...).

#include <ATen/core/Tensor.h>

#include <vector>

namespace torchplug::core {

// Maps a possibly negative `dim` into [0, ndim); names the op on failure.
int64_t normalize_dim(const char* op, int64_t dim, int64_t ndim);

// Broadcasts `index` to `src`'s shape the way torch_scatter does: a 1-D index
// is laid along `dim`, missing trailing dimensions are added, then every
// dimension of size 1 is expanded. Returns a view; fails with a message naming
// the op when the shapes cannot be reconciled or src has no dimensions.
at::Tensor broadcast(const char* op, const at::Tensor& index, const at::Tensor& src, int64_t dim);
at::Tensor broadcast(const char* op, const at::Tensor& index, c10::SymIntArrayRef src_sizes,
                     int64_t dim);

// `index` after broadcast() varies only along `dim`: the whole index is one
// vector of length src.size(dim), and kernels can read it as such.
bool varies_only_along(const at::Tensor& broadcast_index, int64_t dim);

// `sizes` viewed as [outer, sizes[dim], inner].
struct DimSplit {
  int64_t outer;
  int64_t size;
  int64_t inner;
};
DimSplit split_at(at::IntArrayRef sizes, int64_t dim);

// `sizes` with sizes[dim] replaced by `size`: the output shape of a reduction
// of `sizes` along `dim` into `size` slots.
std::vector<int64_t> sizes_with(at::IntArrayRef sizes, int64_t dim, int64_t size);

}  // namespace torchplug::core
