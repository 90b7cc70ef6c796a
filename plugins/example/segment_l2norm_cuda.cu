// example::segment_l2norm on CUDA: the squares summed by the reduction layer's
// segment kernels (a shared indptr: no index plan to build), compiled here
// from the installed header for the one entry this file takes. They run on
// the current stream of src's device, which segment_l2norm_by makes current.

#include "segment_l2norm_kernel.h"

#include <torchplug/core/library.h>
#include <torchplug/core/reduce/cuda/strategy.cuh>

namespace example::detail {
namespace {

at::Tensor segment_l2norm_cuda(const at::Tensor& src, const at::Tensor& indptr) {
  return segment_l2norm_by(src, indptr, &torchplug::core::segment_csr_kernel_cuda<torchplug::core::SumPolicy>);
}

}  // namespace
}  // namespace example::detail

TORCHPLUG_LIBRARY_IMPL(example, CUDA, m) {
  m.impl(example::detail::kSegmentL2Norm, &example::detail::segment_l2norm_cuda);
}
