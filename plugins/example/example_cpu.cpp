// example::edge_dot on the CPU: edges split across threads by at::parallel_for.

#include "example_kernel.h"

#include <torchplug/core/library.h>
#include <torchplug/core/vectorise.h>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>

namespace example::detail {
namespace {

at::Tensor edge_dot_cpu(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& src_in,
                        const at::Tensor& dst_in) {
  const auto in = prepare(x_in, y_in, src_in, dst_in);  // checks every index value
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.x.scalar_type(), kOp, [&] {
    const scalar_t* x = in.x.const_data_ptr<scalar_t>();
    const scalar_t* y = in.y.const_data_ptr<scalar_t>();
    const int64_t* src = in.src.const_data_ptr<int64_t>();
    const int64_t* dst = in.dst.const_data_ptr<int64_t>();
    scalar_t* out = in.out.mutable_data_ptr<scalar_t>();
    const int64_t F = in.F, x_stride = in.x.stride(0), y_stride = in.y.stride(0);
    // About 32768 multiply-adds per task (torch's grain size).
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(F, 1));
    at::parallel_for(0, in.E, grain, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        out[e] = static_cast<scalar_t>(torchplug::core::dot(x + src[e] * x_stride, y + dst[e] * y_stride, F));
      }
    });
  });
  return in.out;
}

}  // namespace
}  // namespace example::detail

TORCHPLUG_LIBRARY_IMPL(example, CPU, m) { m.impl("edge_dot", &example::detail::edge_dot_cpu); }
