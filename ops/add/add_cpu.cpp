// torchplug::add CPU kernel: one pass over the output, parallel over the
// machine's cores through TensorIterator (which also walks broadcast strides);
// inputs of another dtype than the result are converted a chunk at a time.

#include "add_kernel.h"

#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/vectorise.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <c10/util/TypeCast.h>

#include <algorithm>

namespace torchplug::add_detail {
namespace {

// Elements of a mixed-dtype row converted per step: the two buffers stay in L1.
constexpr int64_t kChunk = 256;

// n elements of `dtype` at `data`, `stride` bytes apart, converted to out_t as
// PyTorch converts an operand to the result dtype.
template <typename out_t>
void load_as(const char* data, int64_t stride, at::ScalarType dtype, int64_t n, out_t* values) {
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "torchplug::add", [&] {
    const auto* x = reinterpret_cast<const scalar_t*>(data);
    if (stride == sizeof(scalar_t)) {
      for (int64_t i = 0; i < n; ++i) values[i] = c10::convert<out_t>(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        values[i] = c10::convert<out_t>(*reinterpret_cast<const scalar_t*>(data + i * stride));
      }
    }
  });
}

template <typename scalar_t>
scalar_t add_one(scalar_t x, scalar_t y) {
  using opmath_t = at::opmath_type<scalar_t>;
  return static_cast<scalar_t>(static_cast<opmath_t>(x) + static_cast<opmath_t>(y));
}

// One row of n elements whose inputs have the output's dtype.
template <typename scalar_t>
TORCHPLUG_VECTORISED_CLONES void add_row(char* out, const char* a, const char* b, const int64_t* strides, int64_t n) {
  auto* o = reinterpret_cast<scalar_t*>(out);
  const auto* x = reinterpret_cast<const scalar_t*>(a);
  const auto* y = reinterpret_cast<const scalar_t*>(b);
  // Contiguous rows, or one input broadcast along the row: plain loops the
  // compiler vectorises.
  constexpr int64_t size = sizeof(scalar_t);
  if (strides[0] == size && strides[1] == size && strides[2] == size) {
    for (int64_t i = 0; i < n; ++i) o[i] = add_one(x[i], y[i]);
    return;
  }
  if (strides[0] == size && strides[1] == 0 && strides[2] == size) {
    for (int64_t i = 0; i < n; ++i) o[i] = add_one(x[0], y[i]);
    return;
  }
  if (strides[0] == size && strides[1] == size && strides[2] == 0) {
    for (int64_t i = 0; i < n; ++i) o[i] = add_one(x[i], y[0]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<scalar_t*>(out + i * strides[0]) =
        add_one(*reinterpret_cast<const scalar_t*>(a + i * strides[1]),
                *reinterpret_cast<const scalar_t*>(b + i * strides[2]));
  }
}

// One row with an input of another dtype: converted kChunk elements at a time
// into buffers of the output's dtype, then added as a same-dtype row.
template <typename scalar_t>
void add_row_converting(char* out, const char* a, const char* b, const int64_t* strides, int64_t n,
                        at::ScalarType a_dtype, at::ScalarType b_dtype) {
  scalar_t x[kChunk], y[kChunk];
  const int64_t buffer_strides[3] = {strides[0], sizeof(scalar_t), sizeof(scalar_t)};
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    load_as(a + i * strides[1], strides[1], a_dtype, m, x);
    load_as(b + i * strides[2], strides[2], b_dtype, m, y);
    add_row<scalar_t>(out + i * strides[0], reinterpret_cast<const char*>(x),
                      reinterpret_cast<const char*>(y), buffer_strides, m);
  }
}

// An input neither contiguous along the row nor broadcast along it.
bool strided(int64_t stride, int64_t size) { return stride != 0 && stride != size; }

// rows x n outputs with a strided input (a transposed one): walked row by row,
// each of its elements lies on another cache line, evicted before the next row
// reads its neighbour; in tiles, the lines are reused while cached. The size
// is the fastest timed on the 2-core CPU (docs/benchmarks.md).
constexpr int64_t kTileRows = 128;
constexpr int64_t kTileCols = 256;

template <typename scalar_t>
void add_tiles(char** data, const int64_t* strides, int64_t n, int64_t rows) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t r1 = std::min(rows, r0 + kTileRows);
    for (int64_t c = 0; c < n; c += kTileCols) {
      const int64_t m = std::min(kTileCols, n - c);
      for (int64_t r = r0; r < r1; ++r) {
        add_row<scalar_t>(data[0] + r * strides[3] + c * strides[0], data[1] + r * strides[4] + c * strides[1],
                          data[2] + r * strides[5] + c * strides[2], strides, m);
      }
    }
  }
}

}  // namespace

void add_kernel_cpu(const AddOperands& operands) {
  // Inputs keep their dtypes: TensorIterator would copy each one to the result
  // dtype on the CPU, where the rows below convert chunks in cache.
  auto iter = at::TensorIteratorConfig()
                  .add_output(operands.out)
                  .add_const_input(operands.a)
                  .add_const_input(operands.b)
                  .check_all_same_dtype(false)
                  .build();
  const auto a_dtype = operands.a.scalar_type();
  const auto b_dtype = operands.b.scalar_type();
  const auto dtype = operands.out.scalar_type();
  const bool same_dtype = a_dtype == dtype && b_dtype == dtype;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "torchplug::add", [&] {
    iter.for_each([&](char** data, const int64_t* strides, int64_t n, int64_t rows) {
      if (same_dtype && rows > 1 &&
          (strided(strides[1], sizeof(scalar_t)) || strided(strides[2], sizeof(scalar_t)))) {
        add_tiles<scalar_t>(data, strides, n, rows);
        return;
      }
      for (int64_t r = 0; r < rows; ++r) {
        auto* out = data[0] + r * strides[3];
        const auto* a = data[1] + r * strides[4];
        const auto* b = data[2] + r * strides[5];
        if (same_dtype) {
          add_row<scalar_t>(out, a, b, strides, n);
        } else {
          add_row_converting<scalar_t>(out, a, b, strides, n, a_dtype, b_dtype);
        }
      }
    });
  });
}

namespace {

at::Tensor add_cpu(const at::Tensor& a, const at::Tensor& b) {
  auto operands = prepare(a, b);
  TORCHPLUG_CHECK_CPU(kOp, a);
  add_kernel_cpu(operands);
  return operands.out;
}

}  // namespace
}  // namespace torchplug::add_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  m.impl("add", &torchplug::add_detail::add_cpu);
}
