// example::edge_dot on CUDA: a group of threads per edge (a power of two, up
// to a warp, as many as the row has 16-byte vectors), each reading vectors of
// both rows and summing in the math type (float for float16 and bfloat16);
// the group adds its partial sums by shuffles.

#include "example_kernel.h"

#include <torchplug/core/launch.cuh>
#include <torchplug/core/library.h>
#include <torchplug/core/vector.cuh>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>

#include <numeric>

namespace example::detail {
namespace {

namespace core = torchplug::core;

// Thread i works on edge i >> group_shift with the group's lane i % group
// (blocks and the grid stride are multiples of the group, so a group's threads
// stay together in one warp). An edge with an index out of range (CUDA outside
// checked mode) scores 0.
template <typename scalar_t, int V>
__global__ void edge_dot_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                                const int64_t* __restrict__ src, const int64_t* __restrict__ dst,
                                scalar_t* __restrict__ out, int64_t N, int64_t M, int64_t F, int64_t x_stride,
                                int64_t y_stride, int64_t threads, int group_shift) {
  using acc_t = at::opmath_type<scalar_t>;
  const int group = 1 << group_shift;
  const int lane = threadIdx.x & (group - 1);
  // The lanes of this thread's group within its warp, for the shuffles.
  const unsigned mask = group == 32 ? 0xffffffffu : ((1u << group) - 1) << ((threadIdx.x & 31) & ~(group - 1));
  TORCHPLUG_GRID_STRIDE_LOOP(i, threads) {
    const int64_t e = i >> group_shift;
    const int64_t s = src[e];
    const int64_t d = dst[e];
    acc_t sum = 0;
    if (s >= 0 && s < N && d >= 0 && d < M) {
      const scalar_t* a = x + s * x_stride;
      const scalar_t* b = y + d * y_stride;
      for (int64_t f = int64_t{lane} * V; f < F; f += int64_t{group} * V) {
        acc_t va[V], vb[V];
        core::load_as<scalar_t, V>(a + f, va);
        core::load_as<scalar_t, V>(b + f, vb);
#pragma unroll
        for (int k = 0; k < V; ++k) sum += va[k] * vb[k];
      }
    }
    for (int offset = group / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(mask, sum, offset, group);
    if (lane == 0) out[e] = static_cast<scalar_t>(sum);
  }
}

at::Tensor edge_dot_cuda(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& src_in,
                         const at::Tensor& dst_in) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const auto in = prepare(x_in, y_in, src_in, dst_in);  // checks index values in checked mode
  if (in.E == 0) return in.out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.x.scalar_type(), kOp, [&] {
    const scalar_t* x = in.x.const_data_ptr<scalar_t>();
    const scalar_t* y = in.y.const_data_ptr<scalar_t>();
    const int64_t x_stride = in.x.stride(0), y_stride = in.y.stride(0);
    // The widest vector (16 bytes at most) that divides F and both row strides
    // and fits the alignment of x and y.
    const int64_t inner = std::gcd(in.F, std::gcd(x_stride, y_stride));
    core::with_vector_width<scalar_t>(inner, {x, y}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const int64_t vectors = in.F / V;
      int group_shift = 0;
      while (group_shift < 5 && (int64_t{1} << group_shift) < vectors) ++group_shift;
      const int64_t threads = in.E << group_shift;
      core::launch(edge_dot_kernel<scalar_t, V>, threads, x, y, in.src.const_data_ptr<int64_t>(),
                   in.dst.const_data_ptr<int64_t>(), in.out.mutable_data_ptr<scalar_t>(), in.N, in.M, in.F,
                   x_stride, y_stride, threads, group_shift);
    });
  });
  return in.out;
}

}  // namespace
}  // namespace example::detail

TORCHPLUG_LIBRARY_IMPL(example, CUDA, m) { m.impl("edge_dot", &example::detail::edge_dot_cuda); }
