// Segment and gather on CUDA: segment_coo runs scatter's kernels (the index
// plan finds a sorted index and takes no permutation); segment_csr hands a
// shared indptr to the plan directly (scatter_cuda.cuh), and reduces over each
// position's row when the outer slices have indptrs of their own.

#include "gather_cuda.cuh"
#include "segment_entries.h"

namespace torchplug::scatter_detail {

namespace {

struct CudaKernels {
  static void check(const char* op, const at::Tensor& src) { TORCHPLUG_CHECK_CUDA(op, src); }
  template <typename Policy>
  static void scatter(const ScatterProblem& p) {
    core::scatter_kernel_cuda<Policy>(p);
  }
  template <typename Policy>
  static void segment_csr(const SegmentCsr& s) {
    if (!s.indptr.defined()) {
      segment_csr_by_rows(s, &core::scatter_kernel_cuda<Policy>);
      return;
    }
    core::segment_csr_kernel_cuda<Policy>(shared_indptr_problem(s), s.indptr);
  }
  static void gather(const GatherProblem& g) { launch_gather(g); }
};

}  // namespace
}  // namespace torchplug::scatter_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  torchplug::scatter_detail::SegmentEntries<torchplug::scatter_detail::CudaKernels>::register_all(m);
}
