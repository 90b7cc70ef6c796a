// The scatter family's CUDA entry points. The kernels are the reduction
// layer's (core/reduce/cuda/strategy.cuh), one translation unit per reduction
// in cuda/.

#include "scatter_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <c10/cuda/CUDAGuard.h>

namespace torchplug::scatter_detail {
namespace {

// Both entries check devices before anything else, so that a CPU tensor among
// CUDA ones is reported with both devices named; plan() checks them again for
// the Meta and CPU paths. The guard is taken before plan(), which may read the
// index on the device (checked mode, default dim_size).
template <typename Policy>
Result<Policy> scatter_cuda(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  const auto& def = kScatter.of<Policy>();
  const char* op = def.name().c_str();
  core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  std::optional<int64_t> size;
  if (dim_size) size = dim_size->expect_int();
  TORCHPLUG_CHECK_CUDA(op, src);
  const c10::cuda::CUDAGuard guard(src.device());
  const auto problem = core::plan<Policy>(def, src, index, dim, size);
  core::scatter_kernel_cuda<Policy>(problem);
  return results<Policy>(problem);
}

template <typename Policy>
InplaceResult<Policy> scatter_inplace_cuda(const at::Tensor& out, const at::Tensor& src,
                                           const at::Tensor& index, int64_t dim) {
  const auto& def = kScatter.of<Policy>();
  const char* op = def.name().c_str();
  core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  TORCHPLUG_CHECK_CUDA(op, src);
  const c10::cuda::CUDAGuard guard(src.device());
  const auto problem = core::plan_inplace<Policy>(def, out, src, index, dim);
  core::scatter_kernel_cuda<Policy>(problem);
  finish_inplace(problem, out);
  if constexpr (Policy::kHasArg) return problem.arg;
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  using namespace torchplug::scatter_detail;
  torchplug::core::AllReductionOps::for_each([&](auto policy) {
    using Policy = decltype(policy);
    m.impl(kScatter.of<Policy>(), &scatter_cuda<Policy>);
    m.impl(kScatterInplace.of<Policy>(), &scatter_inplace_cuda<Policy>);
  });
}
