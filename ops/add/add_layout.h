#pragma once

// Internal to the add plugin: how the CUDA kernel walks a + b. The output (of
// the broadcast shape, contiguous) is seen as rows of `cols` elements; each
// input steps through it with its own element strides, 0 where it broadcasts.
// Host code only, apart from FastDivider::div, so the CPU tests can check it.

#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace torchplug::add_detail {

__extension__ typedef unsigned __int128 uint128_t;

// n / d for a divisor d >= 1 fixed before the kernel runs, as a multiply-high,
// an add and a shift (Granlund and Montgomery, "Division by invariant integers
// using multiplication", 1994): a GPU has no integer divider, and `/` on 32 or
// 64 bits costs tens of instructions. Exact for every n < 2^(bits - 1), which
// is every index the kernel divides (all below the element count).
template <typename index_t>
struct FastDivider {
  static_assert(std::is_same_v<index_t, uint32_t> || std::is_same_v<index_t, uint64_t>);
  static constexpr int kBits = 8 * sizeof(index_t);
  using wide_t = std::conditional_t<kBits == 32, uint64_t, uint128_t>;

  index_t divisor = 1;
  index_t magic = 1;
  int shift = 0;

  FastDivider() = default;
  explicit FastDivider(index_t d) : divisor(d) {
    TORCH_CHECK(d >= 1 && d <= (index_t{1} << (kBits - 1)), "FastDivider: divisor ", d, " out of range");
    while ((index_t{1} << shift) < d) ++shift;  // shift = ceil(log2(d))
    magic = static_cast<index_t>(((wide_t{1} << kBits) * ((wide_t{1} << shift) - d)) / d + 1);
  }

  C10_HOST_DEVICE index_t div(index_t n) const { return (mulhi(n, magic) + n) >> shift; }

  C10_HOST_DEVICE static index_t mulhi(index_t x, index_t y) {
#ifdef __CUDA_ARCH__
    if constexpr (kBits == 32) {
      return __umulhi(x, y);
    } else {
      return __umul64hi(x, y);
    }
#else
    return static_cast<index_t>((static_cast<wide_t>(x) * y) >> kBits);
#endif
  }
};

// The output of a + b as [sizes[0], ..., sizes[ndim - 1]] (row-major; the last
// dimension is a row) and each input's element strides along those
// dimensions: dimensions of size 1 dropped, and neighbours merged where both
// inputs step through them as through one (the output, contiguous, always
// does). [8192, 1] + [1, 16384] stays two dimensions; [N, F] + [N, F] becomes
// one row of N * F.
struct RowLayout {
  static constexpr int kMaxDims = 25;  // TensorIterator's limit
  int ndim = 1;
  int64_t sizes[kMaxDims] = {1};
  int64_t strides[2][kMaxDims] = {{0}, {0}};  // a's, then b's

  int64_t cols() const { return sizes[ndim - 1]; }
  int64_t rows() const {
    int64_t rows = 1;
    for (int d = 0; d + 1 < ndim; ++d) rows *= sizes[d];
    return rows;
  }
  // The largest element offset input t reaches.
  int64_t max_offset(int t) const {
    int64_t offset = 0;
    for (int d = 0; d < ndim; ++d) offset += (sizes[d] - 1) * strides[t][d];
    return offset;
  }
};

// `out_sizes` is the broadcast shape of a and b, with at least one element.
inline RowLayout row_layout(const char* op, at::IntArrayRef out_sizes, const at::Tensor& a,
                            const at::Tensor& b) {
  const int64_t ndim = static_cast<int64_t>(out_sizes.size());
  const at::Tensor* inputs[2] = {&a, &b};
  // Walk from the innermost dimension out; dims[0] is the innermost kept so far.
  RowLayout reversed;
  reversed.ndim = 0;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    const int64_t size = out_sizes[d];
    if (size == 1) continue;
    int64_t stride[2];
    for (int t = 0; t < 2; ++t) {
      const auto& x = *inputs[t];
      const int64_t xd = d - (ndim - x.dim());  // x's dimension aligned with d
      stride[t] = xd >= 0 && x.size(xd) != 1 ? x.stride(xd) : 0;
    }
    if (reversed.ndim > 0) {
      const int inner = reversed.ndim - 1;
      const auto merges = [&](int t) {
        return stride[t] == reversed.strides[t][inner] * reversed.sizes[inner];
      };
      if (merges(0) && merges(1)) {
        reversed.sizes[inner] *= size;
        continue;
      }
    }
    TORCH_CHECK(reversed.ndim < RowLayout::kMaxDims, op, ": broadcast over more than ",
                RowLayout::kMaxDims, " dimensions that cannot be merged is not supported");
    reversed.sizes[reversed.ndim] = size;
    for (int t = 0; t < 2; ++t) reversed.strides[t][reversed.ndim] = stride[t];
    ++reversed.ndim;
  }
  if (reversed.ndim == 0) return RowLayout{};  // one element
  RowLayout layout;
  layout.ndim = reversed.ndim;
  for (int d = 0; d < layout.ndim; ++d) {
    const int from = layout.ndim - 1 - d;
    layout.sizes[d] = reversed.sizes[from];
    for (int t = 0; t < 2; ++t) layout.strides[t][d] = reversed.strides[t][from];
  }
  return layout;
}

}  // namespace torchplug::add_detail
