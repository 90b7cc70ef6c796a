// Segment and gather on the CPU: segment_coo and segment_csr run scatter's
// CPU schedules (a sorted index takes row ownership), the gathers copy rows.

#include "segment_entries.h"

#include <ATen/Parallel.h>

#include <cstring>

namespace torchplug::scatter_detail {

void gather_kernel_cpu(const GatherProblem& g) {
  if (g.out.numel() == 0) return;
  const int64_t row_bytes = g.inner * g.src.element_size();
  const auto* src = static_cast<const char*>(g.src.const_data_ptr());
  auto* out = static_cast<char*>(g.out.mutable_data_ptr());
  const int64_t* index = g.index.const_data_ptr<int64_t>();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(g.inner, 1));
  at::parallel_for(0, g.outer * g.E, grain, [&](int64_t begin, int64_t end) {
    for (int64_t oe = begin; oe < end; ++oe) {
      const int64_t o = oe / g.E;
      const int64_t row = index[g.index_per_outer ? oe : oe - o * g.E];
      char* target = out + oe * row_bytes;
      if (row >= 0 && row < g.N) {
        std::memcpy(target, src + (o * g.N + row) * row_bytes, row_bytes);
      } else {
        std::memset(target, 0, row_bytes);
      }
    }
  });
}

namespace {

struct CpuKernels {
  static void check(const char* op, const at::Tensor& src) { TORCHPLUG_CHECK_CPU(op, src); }
  template <typename Policy>
  static void scatter(const ScatterProblem& p) {
    scatter_kernel_cpu<Policy>(p);
  }
  template <typename Policy>
  static void segment_csr(const SegmentCsr& s) {
    segment_csr_by_rows<Policy>(s, &scatter_kernel_cpu<Policy>);
  }
  static void gather(const GatherProblem& g) { gather_kernel_cpu(g); }
};

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, CPU, m) {
  torchplug::scatter_detail::SegmentEntries<torchplug::scatter_detail::CpuKernels>::register_all(m);
}
