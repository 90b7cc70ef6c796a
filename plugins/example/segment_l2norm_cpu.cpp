// example::segment_l2norm on the CPU: the squares summed by the reduction
// layer's segment schedule, compiled here from the installed header.

#include "segment_l2norm_kernel.h"

#include <torchplug/core/library.h>
#include <torchplug/core/reduce/cpu_schedules.h>

namespace example::detail {
namespace {

at::Tensor segment_l2norm_cpu(const at::Tensor& src, const at::Tensor& indptr) {
  return segment_l2norm_by(src, indptr, &torchplug::core::segment_kernel_cpu<torchplug::core::SumPolicy>);
}

}  // namespace
}  // namespace example::detail

TORCHPLUG_LIBRARY_IMPL(example, CPU, m) {
  m.impl(example::detail::kSegmentL2Norm, &example::detail::segment_l2norm_cpu);
}
