// spmm's CUDA entry points. The kernels, one translation unit per reduction,
// are in spmm_cuda.cuh.

#include "spmm_entries.h"

namespace torchplug::spmm_detail {
namespace {

struct CudaKernels {
  static void check(const char* op, const at::Tensor& x) { TORCHPLUG_CHECK_CUDA(op, x); }
  template <typename Policy>
  static void run(const SpmmProblem& p) {
    spmm_kernel_cuda<Policy>(p);
  }
};

}  // namespace
}  // namespace torchplug::spmm_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  torchplug::spmm_detail::SpmmEntries<torchplug::spmm_detail::CudaKernels>::register_all(m);
}
