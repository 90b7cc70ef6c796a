// The scatter family's CPU entries: planning, the core reduction layer's CPU
// schedules (core/reduce/cpu_schedules.h) instantiated for every reduction,
// and the registration of each op's CPU kernel.

#include "scatter_kernel.h"

#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/reduce/cpu_schedules.h"

TORCHPLUG_REDUCE_CPU_INSTANTIATE(torchplug::core::SumPolicy)
TORCHPLUG_REDUCE_CPU_INSTANTIATE(torchplug::core::MeanPolicy)
TORCHPLUG_REDUCE_CPU_INSTANTIATE(torchplug::core::MulPolicy)
TORCHPLUG_REDUCE_CPU_INSTANTIATE(torchplug::core::MinPolicy)
TORCHPLUG_REDUCE_CPU_INSTANTIATE(torchplug::core::MaxPolicy)

namespace torchplug::scatter_detail {
namespace {

template <typename Policy>
Result<Policy> scatter_cpu(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                           std::optional<c10::SymInt> dim_size) {
  const auto& op = kScatter.of<Policy>();
  std::optional<int64_t> size;
  if (dim_size) size = dim_size->expect_int();
  const auto problem = core::plan<Policy>(op, src, index, dim, size);
  TORCHPLUG_CHECK_CPU(op.name().c_str(), src);
  core::scatter_kernel_cpu<Policy>(problem);
  return results<Policy>(problem);
}

template <typename Policy>
InplaceResult<Policy> scatter_inplace_cpu(const at::Tensor& out, const at::Tensor& src,
                                          const at::Tensor& index, int64_t dim) {
  const auto& op = kScatter.of<Policy>();
  const auto problem = core::plan_inplace<Policy>(op, out, src, index, dim);
  TORCHPLUG_CHECK_CPU(op.name().c_str(), src);
  core::scatter_kernel_cpu<Policy>(problem);
  finish_inplace(problem, out);
  if constexpr (Policy::kHasArg) return problem.arg;
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  using namespace torchplug::scatter_detail;
  torchplug::core::AllReductionOps::for_each([&](auto policy) {
    using Policy = decltype(policy);
    m.impl(kScatter.of<Policy>(), &scatter_cpu<Policy>);
    m.impl(kScatterInplace.of<Policy>(), &scatter_inplace_cpu<Policy>);
  });
}
