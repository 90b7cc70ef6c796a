// torchplug::add CUDA kernel: one kernel for every layout and dtype pair.
//
// The output is written as rows (add_layout.h): each thread takes chunks of W
// consecutive elements of one row (16 bytes of output), finds the row's
// offset in each input with FastDivider, and reads each input W at a time
// (one vector load where the row is contiguous and aligned), once (where it
// broadcasts along the row) or element by element. Inputs are converted to the
// result dtype as they are loaded, with one switch over their dtype per
// thread, so mixed dtypes need no cast copies. Contiguous a + b is one row;
// a transposed input is walked in bands of 8 rows. Indices are 32-bit when
// every offset fits, 64-bit otherwise.

#include "add_kernel.h"
#include "add_layout.h"

#include "torchplug/core/checks.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/library.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>
#include <c10/util/TypeCast.h>

#include <limits>

namespace torchplug::add_detail {
namespace {

constexpr int kMaxDims = RowLayout::kMaxDims;

// Chunks (of W = 16 bytes of output) per thread: 8 elements, or one chunk of
// 16 bytes. Each chunk is one vector load of each input, all in flight at
// once. 16 elements a thread took almost twice the registers for float32 and
// ran slower in all but one layout (docs/benchmarks.md).
template <typename out_t>
constexpr int kChunksPerThread = core::kVectorWidth<out_t> < 8 ? 8 / core::kVectorWidth<out_t> : 1;

template <typename index_t>
struct Input {
  const void* data;
  at::ScalarType dtype;
  index_t inner;               // element stride along a row; 0 where it broadcasts
  bool vector;                 // every chunk of W can be read as one aligned vector
  index_t strides[kMaxDims];   // per outer dimension, innermost first
};

template <typename index_t>
struct Plan {
  int outer_dims;                        // dimensions above the row
  FastDivider<index_t> outer[kMaxDims];  // their sizes, innermost first
  FastDivider<index_t> chunks_per_band;  // (1 << band_shift) rows of chunks
  int band_shift;
  index_t rows, cols;
  index_t chunks;   // over whole bands: rows rounded up to the band
  bool vector_out;  // every full chunk of the output is 16-byte aligned
  Input<index_t> a, b;
};

template <typename T>
struct Tag {
  using type = T;
};

// f(Tag<T>{}) for the C++ type T of dtype (the dtypes add takes).
template <typename F>
__device__ __forceinline__ void with_type(at::ScalarType dtype, F f) {
  switch (dtype) {
    case at::kByte: return f(Tag<uint8_t>{});
    case at::kChar: return f(Tag<int8_t>{});
    case at::kShort: return f(Tag<int16_t>{});
    case at::kInt: return f(Tag<int32_t>{});
    case at::kLong: return f(Tag<int64_t>{});
    case at::kHalf: return f(Tag<c10::Half>{});
    case at::kBFloat16: return f(Tag<c10::BFloat16>{});
    case at::kFloat: return f(Tag<float>{});
    default: return f(Tag<double>{});
  }
}

// As PyTorch adds: each input converted to the result dtype, then to its math type.
template <typename out_t, typename in_t>
__device__ __forceinline__ at::opmath_type<out_t> to_math(in_t x) {
  return static_cast<at::opmath_type<out_t>>(c10::convert<out_t>(x));
}

template <typename out_t, int W, int U, typename index_t>
__device__ __forceinline__ void load_chunks(const Input<index_t>& in, const index_t (&offset)[U],
                                            const int (&count)[U],
                                            at::opmath_type<out_t> (&values)[U][W]) {
  with_type(in.dtype, [&](auto tag) {
    using in_t = typename decltype(tag)::type;
    const auto* data = static_cast<const in_t*>(in.data);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (count[u] == 0) continue;
      if (in.inner == 0) {
        const auto x = to_math<out_t>(data[offset[u]]);
#pragma unroll
        for (int k = 0; k < W; ++k) values[u][k] = x;
      } else if (in.vector && count[u] == W) {
        const auto v = *reinterpret_cast<const core::Vector<in_t, W>*>(data + offset[u]);
#pragma unroll
        for (int k = 0; k < W; ++k) values[u][k] = to_math<out_t>(v.val[k]);
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) {
          if (k < count[u]) values[u][k] = to_math<out_t>(data[offset[u] + k * in.inner]);
        }
      }
    }
  });
}

template <typename out_t, typename index_t>
__global__ void add_rows_kernel(out_t* __restrict__ out, const Plan<index_t> plan) {
  constexpr int W = core::kVectorWidth<out_t>;
  constexpr int U = kChunksPerThread<out_t>;
  using opmath_t = at::opmath_type<out_t>;

  index_t out_offset[U], a_offset[U], b_offset[U];
  int count[U];  // elements of the chunk inside its row; 0 past the end
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const index_t chunk = (static_cast<index_t>(blockIdx.x) * U + u) * blockDim.x + threadIdx.x;
    count[u] = 0;
    if (chunk >= plan.chunks) continue;
    // Chunks go down the rows of a band first, then along them (one band of
    // one row unless an input is transposed: see launch_rows).
    const index_t band = plan.chunks_per_band.div(chunk);
    const index_t in_band = chunk - band * plan.chunks_per_band.divisor;
    const index_t band_mask = (index_t{1} << plan.band_shift) - 1;
    index_t row = (band << plan.band_shift) + (in_band & band_mask);
    const index_t col = (in_band >> plan.band_shift) * W;
    if (row >= plan.rows) continue;
    const index_t left = plan.cols - col;
    count[u] = left < static_cast<index_t>(W) ? static_cast<int>(left) : W;
    out_offset[u] = row * plan.cols + col;
    a_offset[u] = col * plan.a.inner;
    b_offset[u] = col * plan.b.inner;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == plan.outer_dims) break;
      index_t coord = row;
      if (d + 1 < plan.outer_dims) {
        const index_t next = plan.outer[d].div(row);
        coord = row - next * plan.outer[d].divisor;
        row = next;
      }
      a_offset[u] += coord * plan.a.strides[d];
      b_offset[u] += coord * plan.b.strides[d];
    }
  }

  opmath_t x[U][W], y[U][W];
  load_chunks<out_t, W, U>(plan.a, a_offset, count, x);
  load_chunks<out_t, W, U>(plan.b, b_offset, count, y);

#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (count[u] == 0) continue;
    core::Vector<out_t, W> z;
#pragma unroll
    for (int k = 0; k < W; ++k) z.val[k] = static_cast<out_t>(x[u][k] + y[u][k]);
    if (plan.vector_out && count[u] == W) {
      *reinterpret_cast<core::Vector<out_t, W>*>(out + out_offset[u]) = z;
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (k < count[u]) out[out_offset[u] + k] = z.val[k];
      }
    }
  }
}

// Bands of 8 rows: a warp of 32 threads covers 8 rows by 4 chunks.
constexpr int kBandShift = 3;

// Steps through rows more closely than along them, as a transpose does.
template <typename index_t>
bool transposes(const Input<index_t>& in) {
  return in.inner > 1 && in.strides[0] != 0 && in.strides[0] < in.inner;
}

template <typename index_t>
Input<index_t> make_input(const at::Tensor& t, const RowLayout& layout, int index, int width) {
  Input<index_t> in{};
  in.data = t.const_data_ptr();
  in.dtype = t.scalar_type();
  const int last = layout.ndim - 1;
  in.inner = static_cast<index_t>(layout.strides[index][last]);
  in.vector = in.inner == 1 && core::is_aligned(in.data, width * t.element_size());
  for (int d = 0; d < last; ++d) {
    const int64_t stride = layout.strides[index][last - 1 - d];
    in.strides[d] = static_cast<index_t>(stride);
    in.vector = in.vector && stride % width == 0;  // every row starts aligned
  }
  return in;
}

template <typename out_t, typename index_t>
void launch_rows(const AddOperands& operands, const RowLayout& layout) {
  constexpr int W = core::kVectorWidth<out_t>;
  constexpr int U = kChunksPerThread<out_t>;
  Plan<index_t> plan{};
  const int last = layout.ndim - 1;
  plan.outer_dims = last;
  for (int d = 0; d < last; ++d) {
    plan.outer[d] = FastDivider<index_t>(static_cast<index_t>(layout.sizes[last - 1 - d]));
  }
  const int64_t rows = layout.rows();
  const int64_t cols = layout.cols();
  plan.rows = static_cast<index_t>(rows);
  plan.cols = static_cast<index_t>(cols);
  plan.vector_out = (last == 0 || cols % W == 0) &&
                    core::is_aligned(operands.out.const_data_ptr(), W * sizeof(out_t));
  plan.a = make_input<index_t>(operands.a, layout, 0, W);
  plan.b = make_input<index_t>(operands.b, layout, 1, W);
  // Row by row, a warp would read a transposed input one element per 32-byte
  // sector (consecutive columns lie a whole row of the source apart). Bands
  // walked down first let it read 8 neighbours in each of 4 columns instead.
  const bool transposed = last > 0 && (transposes(plan.a) || transposes(plan.b));
  plan.band_shift = transposed ? kBandShift : 0;
  const int64_t band_rows = int64_t{1} << plan.band_shift;
  const int64_t chunks_per_band = band_rows * at::ceil_div<int64_t>(cols, W);
  plan.chunks_per_band = FastDivider<index_t>(static_cast<index_t>(chunks_per_band));
  plan.chunks = static_cast<index_t>(at::ceil_div(rows, band_rows) * chunks_per_band);
  core::launch(add_rows_kernel<out_t, index_t>, at::ceil_div<int64_t>(plan.chunks, U),
               operands.out.mutable_data_ptr<out_t>(), plan);
}

}  // namespace

void add_kernel_cuda(const AddOperands& operands) {
  const auto& out = operands.out;
  const int64_t n = out.numel();
  if (n == 0) return;
  const auto layout = row_layout(kOp, out.sizes(), operands.a, operands.b);
  // 32-bit indices (cheaper to multiply and divide) when every index and
  // offset stays below 2^31, FastDivider's domain (chunks cover up to 8 rows
  // more than the output has).
  constexpr int64_t k32 = std::numeric_limits<int32_t>::max();
  const bool narrow = layout.rows() + 8 <= k32 / layout.cols() && layout.max_offset(0) <= k32 &&
                      layout.max_offset(1) <= k32;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "torchplug::add", [&] {
    if (narrow) {
      launch_rows<scalar_t, uint32_t>(operands, layout);
    } else {
      launch_rows<scalar_t, uint64_t>(operands, layout);
    }
  });
}

namespace {

at::Tensor add_cuda(const at::Tensor& a, const at::Tensor& b) {
  auto operands = prepare(a, b);
  TORCHPLUG_CHECK_CUDA(kOp, a);
  const c10::cuda::CUDAGuard guard(a.device());
  add_kernel_cuda(operands);
  return operands.out;
}

}  // namespace
}  // namespace torchplug::add_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  m.impl("add", &torchplug::add_detail::add_cuda);
}
