// torchplug::scatter_sum CPU kernels, parallel over the machine's cores.
// Race-free and deterministic: no two threads ever add into one element.

#include "scatter_kernel.h"

#include "torchplug/core/checks.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

namespace torchplug::scatter_detail {
namespace {

// Work below this many source elements runs on one thread.
constexpr int64_t kSerialElements = 1 << 15;

// index is one vector along dim. Each thread owns a range of output rows and
// walks the whole index, adding only the rows it owns: every source row is read
// by exactly one thread.
template <typename scalar_t, typename acc_t>
void scatter_rows(const ScatterProblem& p, const scalar_t* src, const int64_t* index, acc_t* acc) {
  const int64_t grain = p.outer * p.E * p.inner < kSerialElements ? p.N : 1;
  at::parallel_for(0, p.N, grain, [&](int64_t first, int64_t last) {
    for (int64_t o = 0; o < p.outer; ++o) {
      const scalar_t* src_o = src + o * p.E * p.inner;
      acc_t* acc_o = acc + o * p.N * p.inner;
      for (int64_t e = 0; e < p.E; ++e) {
        const int64_t row = index[e];
        if (row < first || row >= last) continue;
        const scalar_t* from = src_o + e * p.inner;
        acc_t* to = acc_o + row * p.inner;
        for (int64_t i = 0; i < p.inner; ++i) to[i] += static_cast<acc_t>(from[i]);
      }
    }
  });
}

// index has src's shape. Each thread owns a range of (outer, inner) columns;
// a column's elements all land in that column of the output.
template <typename scalar_t, typename acc_t>
void scatter_columns(const ScatterProblem& p, const scalar_t* src, const int64_t* index, acc_t* acc) {
  const int64_t columns = p.outer * p.inner;
  const int64_t grain = p.outer * p.E * p.inner < kSerialElements ? columns : 1;
  at::parallel_for(0, columns, grain, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      const int64_t o = c / p.inner;
      const int64_t i = c % p.inner;
      const int64_t base = o * p.E * p.inner + i;
      acc_t* acc_col = acc + o * p.N * p.inner + i;
      for (int64_t e = 0; e < p.E; ++e) {
        const int64_t pos = base + e * p.inner;
        acc_col[index[pos] * p.inner] += static_cast<acc_t>(src[pos]);
      }
    }
  });
}

}  // namespace

void scatter_sum_kernel_cpu(const ScatterProblem& p) {
  if (p.src.numel() == 0 || p.acc.numel() == 0) return;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::scatter_sum", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto* src = p.src.const_data_ptr<scalar_t>();
    const auto* index = p.index.const_data_ptr<int64_t>();
    auto* acc = p.acc.mutable_data_ptr<acc_t>();
    if (p.index_1d) {
      scatter_rows<scalar_t, acc_t>(p, src, index, acc);
    } else {
      scatter_columns<scalar_t, acc_t>(p, src, index, acc);
    }
  });
}

namespace {

at::Tensor scatter_sum_cpu(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                           std::optional<c10::SymInt> dim_size) {
  std::optional<int64_t> size;
  if (dim_size) size = dim_size->expect_int();
  const auto problem = plan(src, index, dim, size);
  TORCHPLUG_CHECK_CPU(kOp, src);
  scatter_sum_kernel_cpu(problem);
  return finish(problem);
}

at::Tensor& scatter_sum_inplace_cpu(at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                                    int64_t dim) {
  const auto problem = plan_inplace(out, src, index, dim);
  TORCHPLUG_CHECK_CPU(kOp, src);
  scatter_sum_kernel_cpu(problem);
  finish_inplace(problem, out);
  return out;
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, CPU, m) {
  m.impl("scatter_sum", &torchplug::scatter_detail::scatter_sum_cpu);
  m.impl("scatter_sum_", &torchplug::scatter_detail::scatter_sum_inplace_cpu);
}
