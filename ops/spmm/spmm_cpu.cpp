// spmm on the CPU: rows in parallel, each row's edges in order into one
// accumulator row in the math type (so min and max keep the first edge
// holding the result, and results do not depend on the thread count). The x
// rows the edges name are random: they are prefetched kPrefetchEdges edges
// ahead, or each edge waits out a cache miss.

#include "spmm_entries.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace torchplug::spmm_detail {
namespace {

constexpr int64_t kPrefetchEdges = 16;

template <typename T>
inline void prefetch_row(const T* row, int64_t F) {
  constexpr int64_t kPerLine = 64 / sizeof(T);
  for (int64_t f = 0; f < F; f += kPerLine) __builtin_prefetch(row + f);
}

template <typename Policy, typename scalar_t>
void spmm_rows(const SpmmProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t* rowptr = p.rowptr.const_data_ptr<int64_t>();
  const int64_t* col = p.col.const_data_ptr<int64_t>();
  const scalar_t* value = p.value.defined() ? p.value.const_data_ptr<scalar_t>() : nullptr;
  const scalar_t* x = p.x.const_data_ptr<scalar_t>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  int64_t* arg = Policy::kHasArg ? p.arg.mutable_data_ptr<int64_t>() : nullptr;
  const int64_t F = p.F;
  const int64_t average_row = std::max<int64_t>(1, p.nnz / std::max<int64_t>(p.M, 1));
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / (average_row * std::max<int64_t>(F, 1)));
  at::parallel_for(0, p.M, grain, [&](int64_t first, int64_t last) {
    std::vector<acc_t> acc(F);
    std::vector<int64_t> held(Policy::kHasArg ? F : 0);
    for (int64_t row = first; row < last; ++row) {
      const int64_t start = rowptr[row], end = rowptr[row + 1];
      std::fill(acc.begin(), acc.end(), Policy::template identity<acc_t>());
      std::fill(held.begin(), held.end(), start);  // the first edge holds an identity that nothing beats
      acc_t* __restrict__ into = acc.data();
      int64_t* __restrict__ holder = held.data();
      for (int64_t k = start; k < end; ++k) {
        if (k + kPrefetchEdges < p.nnz) prefetch_row(x + col[k + kPrefetchEdges] * F, F);
        const acc_t weight = value != nullptr ? static_cast<acc_t>(value[k]) : acc_t(1);
        const scalar_t* __restrict__ source = x + col[k] * F;
        for (int64_t f = 0; f < F; ++f) {
          const acc_t message = weight * static_cast<acc_t>(source[f]);
          if constexpr (Policy::kHasArg) {  // selects, not a branch: the loop vectorises
            const bool wins = Policy::wins(message, into[f]);
            into[f] = wins ? message : into[f];
            holder[f] = wins ? k : holder[f];
          } else {
            Policy::combine(into[f], message);
          }
        }
      }
      const int64_t count = end - start;
      for (int64_t f = 0; f < F; ++f) {
        out[row * F + f] = static_cast<scalar_t>(core::finish<Policy>(acc[f], count, false));
        if constexpr (Policy::kHasArg) arg[row * F + f] = count == 0 ? p.nnz : held[f];
      }
    }
  });
}

}  // namespace

template <typename Policy>
void spmm_kernel_cpu(const SpmmProblem& p) {
  if (p.out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.x.scalar_type(), kOpName<Policy>,
                                  [&] { spmm_rows<Policy, scalar_t>(p); });
}

namespace {

struct CpuKernels {
  static void check(const char* op, const at::Tensor& x) { TORCHPLUG_CHECK_CPU(op, x); }
  template <typename Policy>
  static void run(const SpmmProblem& p) {
    spmm_kernel_cpu<Policy>(p);
  }
};

}  // namespace
}  // namespace torchplug::spmm_detail

TORCH_LIBRARY_IMPL(torchplug, CPU, m) {
  torchplug::spmm_detail::SpmmEntries<torchplug::spmm_detail::CpuKernels>::register_all(m);
}
