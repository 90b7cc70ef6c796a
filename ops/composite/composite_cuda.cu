// The composites' CUDA entry points. The kernels, one translation unit per
// program, are in rows_cuda.cuh.

#include "composite_entries.h"

namespace torchplug::composite_detail {
namespace {

struct CudaKernels {
  static void check(const char* op, const at::Tensor& src) { TORCHPLUG_CHECK_CUDA(op, src); }
  template <template <typename> class Program>
  static void run(const RowsProblem& r, bool option) {
    run_cuda<Program>(r, option);
  }
};

}  // namespace
}  // namespace torchplug::composite_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  torchplug::composite_detail::CompositeEntries<torchplug::composite_detail::CudaKernels>::register_all(m);
}
