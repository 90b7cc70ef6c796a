// Segment and gather on the CPU: segment_coo and segment_csr run scatter's
// CPU schedules (a sorted index takes row ownership), the gathers copy rows.

#include "segment_entries.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <cstring>

namespace torchplug::scatter_detail {
namespace {

// rows[k] = r for indptr[r] <= k < indptr[r + 1] (bounds clamped into [0, E]),
// N past indptr[N]: GatherProblem's rows of an indptr, which on the CPU is
// checked to start at 0.
at::Tensor rows_of_positions_cpu(const at::Tensor& indptr, int64_t E) {
  const int64_t N = indptr.numel() - 1;
  at::Tensor rows = at::empty({E}, indptr.options());
  const int64_t* bounds = indptr.const_data_ptr<int64_t>();
  int64_t* out = rows.mutable_data_ptr<int64_t>();
  const auto at_bound = [&](int64_t r) { return std::min(std::max(bounds[r], int64_t{0}), E); };
  at::parallel_for(0, N + 1, 1 << 10, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t end = r < N ? at_bound(r + 1) : E;
      for (int64_t k = at_bound(r); k < end; ++k) out[k] = r;
    }
  });
  return rows;
}

void gather_kernel_cpu(const GatherProblem& g) {
  if (g.out.numel() == 0) return;
  const int64_t row_bytes = g.inner * g.src.element_size();
  const auto* src = static_cast<const char*>(g.src.const_data_ptr());
  auto* out = static_cast<char*>(g.out.mutable_data_ptr());
  const at::Tensor rows = g.index.defined() ? g.index : rows_of_positions_cpu(g.indptr, g.E);
  const int64_t* index = rows.const_data_ptr<int64_t>();
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

struct CpuKernels {
  static void check(const char* op, const at::Tensor& src) { TORCHPLUG_CHECK_CPU(op, src); }
  template <typename Policy>
  static void scatter(const ScatterProblem& p) {
    core::scatter_kernel_cpu<Policy>(p);
  }
  template <typename Policy>
  static void segment_csr(const SegmentCsr& s) {
    if (!s.indptr.defined()) {
      segment_csr_by_rows(s, &core::scatter_kernel_cpu<Policy>);
      return;
    }
    core::segment_kernel_cpu<Policy>(shared_indptr_problem(s), s.indptr);
  }
  static void gather(const GatherProblem& g) { gather_kernel_cpu(g); }
};

}  // namespace
}  // namespace torchplug::scatter_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  torchplug::scatter_detail::SegmentEntries<torchplug::scatter_detail::CpuKernels>::register_all(m);
}
