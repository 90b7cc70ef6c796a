// torchplug::add CUDA kernels: 128-bit vector loads and stores when the three
// tensors are contiguous and aligned; otherwise a strided kernel over the
// broadcast shape with 64-bit offsets.

#include "add_kernel.h"

#include "torchplug/core/checks.h"
#include "torchplug/core/launch.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/ceil_div.h>
#include "torchplug/core/library.h"

#include <torch/library.h>

namespace torchplug::add_detail {
namespace {

template <typename scalar_t>
__device__ __forceinline__ scalar_t add_one(scalar_t x, scalar_t y) {
  using opmath_t = at::opmath_type<scalar_t>;
  return static_cast<scalar_t>(static_cast<opmath_t>(x) + static_cast<opmath_t>(y));
}

// Each thread keeps kUnroll vector loads of a and of b in flight at once.
constexpr int kUnroll = 4;

template <typename scalar_t>
__global__ void add_vectorized_kernel(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                                      scalar_t* __restrict__ out, int64_t n) {
  constexpr int kWidth = core::kVectorWidth<scalar_t>;
  using vec_t = core::Vector<scalar_t, kWidth>;
  const int64_t vectors = n / kWidth;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; base < vectors;
       base += stride * kUnroll) {
    vec_t x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * stride;
      if (v < vectors) {
        x[u] = reinterpret_cast<const vec_t*>(a)[v];
        y[u] = reinterpret_cast<const vec_t*>(b)[v];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * stride;
      if (v < vectors) {
        vec_t z;
#pragma unroll
        for (int k = 0; k < kWidth; ++k) z.val[k] = add_one(x[u].val[k], y[u].val[k]);
        reinterpret_cast<vec_t*>(out)[v] = z;
      }
    }
  }
  // The last n % kWidth elements, one per thread of the first block.
  const int64_t tail = vectors * kWidth + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) out[tail] = add_one(a[tail], b[tail]);
}

constexpr int kMaxDims = 12;

// Byte strides of the output and both inputs over a (coalesced) iteration shape.
struct StridedShape {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[3][kMaxDims];
};

template <typename scalar_t>
__global__ void add_strided_kernel(char* out, const char* a, const char* b, StridedShape shape,
                                   int64_t n) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, n) {
    int64_t rest = i;
    int64_t offset[3] = {0, 0, 0};
    for (int d = 0; d < shape.ndim; ++d) {
      const int64_t coord = rest % shape.sizes[d];
      rest /= shape.sizes[d];
#pragma unroll
      for (int t = 0; t < 3; ++t) offset[t] += coord * shape.strides[t][d];
    }
    *reinterpret_cast<scalar_t*>(out + offset[0]) =
        add_one(*reinterpret_cast<const scalar_t*>(a + offset[1]),
                *reinterpret_cast<const scalar_t*>(b + offset[2]));
  }
}

template <typename scalar_t>
void launch_strided(const AddOperands& operands) {
  auto iter = at::TensorIteratorConfig()
                  .add_output(operands.out)
                  .add_const_input(operands.a)
                  .add_const_input(operands.b)
                  .build();
  TORCH_CHECK(iter.ndim() <= kMaxDims, kOp, ": broadcast over ", iter.ndim(),
              " dimensions is not supported (at most ", kMaxDims, ")");
  StridedShape shape{};
  shape.ndim = iter.ndim();
  for (int d = 0; d < iter.ndim(); ++d) {
    shape.sizes[d] = iter.shape()[d];
    for (int t = 0; t < 3; ++t) shape.strides[t][d] = iter.strides(t)[d];
  }
  core::launch(add_strided_kernel<scalar_t>, iter.numel(), static_cast<char*>(iter.data_ptr(0)),
               static_cast<const char*>(iter.data_ptr(1)), static_cast<const char*>(iter.data_ptr(2)),
               shape, iter.numel());
}

}  // namespace

void add_kernel_cuda(const AddOperands& operands) {
  const auto& a = operands.a;
  const auto& b = operands.b;
  const auto& out = operands.out;
  const int64_t n = out.numel();
  if (n == 0) return;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "torchplug::add", [&] {
    const bool flat = a.sizes() == out.sizes() && b.sizes() == out.sizes() && a.is_contiguous() &&
                      b.is_contiguous() && out.is_contiguous();
    if (flat && core::is_aligned(a.const_data_ptr(), 16) && core::is_aligned(b.const_data_ptr(), 16) &&
        core::is_aligned(out.data_ptr(), 16)) {
      const int64_t vectors = n / core::kVectorWidth<scalar_t>;
      const int64_t items = std::max<int64_t>(1, at::ceil_div<int64_t>(vectors, kUnroll));
      core::launch(add_vectorized_kernel<scalar_t>, items, a.const_data_ptr<scalar_t>(),
                   b.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), n);
    } else {
      launch_strided<scalar_t>(operands);
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
