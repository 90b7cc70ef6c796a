// torchplug::scatter_sum CPU kernels, parallel over the machine's cores.
// Race-free and deterministic: no two threads ever add into one element.

#include "scatter_kernel.h"

#include "torchplug/core/checks.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>

namespace torchplug::scatter_detail {
namespace {

// Work below this many source elements runs on one thread.
constexpr int64_t kSerialElements = 1 << 15;
// Destination rows are prefetched this many source rows ahead: random
// read-modify-writes are latency bound, not bandwidth bound.
constexpr int64_t kPrefetchRows = 32;
// Per-thread private outputs are used while they take at most this many bytes.
constexpr int64_t kPrivateBytes = int64_t{256} << 20;

template <typename acc_t>
inline void prefetch_row(const acc_t* row, int64_t inner) {
  constexpr int64_t kLine = 64 / sizeof(acc_t);
  for (int64_t i = 0; i < inner; i += kLine) __builtin_prefetch(row + i, 1);
}

// Which part of the work one thread does: source rows [e_begin, e_end), the
// output rows [first, last) it may write, columns [col_begin, col_end).
struct Slice {
  int64_t e_begin, e_end, first, last, col_begin, col_end;
};

// Adds the slice's source rows whose index falls in its output rows into acc.
template <typename scalar_t, typename acc_t>
void add_rows(const ScatterProblem& p, const scalar_t* src, const int64_t* index, acc_t* acc,
              const Slice& s) {
  const int64_t inner = p.inner;
  const int64_t width = s.col_end - s.col_begin;
  for (int64_t o = 0; o < p.outer; ++o) {
    const scalar_t* src_o = src + o * p.E * inner + s.col_begin;
    acc_t* acc_o = acc + o * p.N * inner + s.col_begin;
    if (inner == 1) {  // one value a row: prefetching it would cost more than the miss
      const auto span = static_cast<uint64_t>(s.last - s.first);
      for (int64_t e = s.e_begin; e < s.e_end; ++e) {
        const int64_t row = index[e];
        if (static_cast<uint64_t>(row - s.first) < span) acc_o[row] += static_cast<acc_t>(src_o[e]);
      }
      continue;
    }
    for (int64_t e = s.e_begin; e < s.e_end; ++e) {
      if (e + kPrefetchRows < s.e_end) {
        const int64_t ahead = index[e + kPrefetchRows];
        if (ahead >= s.first && ahead < s.last) prefetch_row(acc_o + ahead * inner, width);
      }
      const int64_t row = index[e];
      if (row < s.first || row >= s.last) continue;
      const scalar_t* from = src_o + e * inner;
      acc_t* to = acc_o + row * inner;
      for (int64_t i = 0; i < width; ++i) to[i] += static_cast<acc_t>(from[i]);
    }
  }
}

// index is one vector along dim. Three race-free schedules:
//  - column slices, for wide rows: each thread adds its own 64-byte-aligned
//    slice of every row's columns. Every source byte is read once, the output
//    is not copied, and no two threads share a cache line.
//  - private outputs: each thread sums a slice of the source rows into its own
//    copy of the output (thread 0 into acc), then the copies are added up. Used
//    while the copies are small.
//  - row ownership: each thread owns a range of output rows and walks the whole
//    index, adding only the rows it owns.
template <typename scalar_t, typename acc_t>
void scatter_rows(const ScatterProblem& p, const scalar_t* src, const int64_t* index, acc_t* acc) {
  const int64_t threads = at::get_num_threads();
  const int64_t out_numel = p.outer * p.N * p.inner;
  if (threads == 1 || p.outer * p.E * p.inner < kSerialElements) {
    add_rows(p, src, index, acc, Slice{0, p.E, 0, p.N, 0, p.inner});
    return;
  }
  constexpr int64_t kLine = 64 / sizeof(acc_t);
  const int64_t lines = p.inner / kLine;
  if (lines >= threads) {
    at::parallel_for(0, lines, 1, [&](int64_t line_begin, int64_t line_end) {
      const int64_t col_end = line_end == lines ? p.inner : line_end * kLine;
      add_rows(p, src, index, acc, Slice{0, p.E, 0, p.N, line_begin * kLine, col_end});
    });
    return;
  }
  const int64_t private_bytes = (threads - 1) * out_numel * static_cast<int64_t>(sizeof(acc_t));
  if (private_bytes <= kPrivateBytes && p.N * 4 <= p.E) {
    const at::Tensor copies = at::zeros(
        {threads - 1, out_numel}, p.src.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    acc_t* copy = copies.mutable_data_ptr<acc_t>();
    const int64_t chunk = (p.E + threads - 1) / threads;
    at::parallel_for(0, threads, 1, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        acc_t* dst = t == 0 ? acc : copy + (t - 1) * out_numel;
        const Slice slice{std::min(p.E, t * chunk), std::min(p.E, (t + 1) * chunk), 0, p.N, 0,
                          p.inner};
        add_rows(p, src, index, dst, slice);
      }
    });
    at::parallel_for(0, out_numel, 1 << 12, [&](int64_t begin, int64_t end) {
      for (int64_t t = 0; t < threads - 1; ++t) {
        const acc_t* from = copy + t * out_numel;
        for (int64_t j = begin; j < end; ++j) acc[j] += from[j];
      }
    });
    return;
  }
  at::parallel_for(0, p.N, 1, [&](int64_t first, int64_t last) {
    add_rows(p, src, index, acc, Slice{0, p.E, first, last, 0, p.inner});
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
  const auto acc_tensor = accumulator(p);
  if (p.src.numel() > 0 && p.out.numel() > 0) {
    AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::scatter_sum", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      const auto* src = p.src.const_data_ptr<scalar_t>();
      const auto* index = p.index.const_data_ptr<int64_t>();
      auto* acc = acc_tensor.mutable_data_ptr<acc_t>();
      if (p.index_1d) {
        scatter_rows<scalar_t, acc_t>(p, src, index, acc);
      } else {
        scatter_columns<scalar_t, acc_t>(p, src, index, acc);
      }
    });
  }
  store_accumulator(p, acc_tensor);
}

namespace {

at::Tensor scatter_sum_cpu(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                           std::optional<c10::SymInt> dim_size) {
  std::optional<int64_t> size;
  if (dim_size) size = dim_size->expect_int();
  const auto problem = plan(src, index, dim, size);
  TORCHPLUG_CHECK_CPU(kOp, src);
  scatter_sum_kernel_cpu(problem);
  return problem.out;
}

void scatter_sum_inplace_cpu(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                             int64_t dim) {
  const auto problem = plan_inplace(out, src, index, dim);
  TORCHPLUG_CHECK_CPU(kOp, src);
  scatter_sum_kernel_cpu(problem);
  finish_inplace(problem, out);
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, CPU, m) {
  m.impl("scatter_sum", &torchplug::scatter_detail::scatter_sum_cpu);
  m.impl("scatter_sum_", &torchplug::scatter_detail::scatter_sum_inplace_cpu);
}
