// spmm, spmm_transpose and sddmm on the CPU. spmm: rows in parallel, each row's edges in order into one
// accumulator row in the math type (so min and max keep the first edge
// holding the result, and results do not depend on the thread count). The x
// rows the edges name are random: they are prefetched kPrefetchEdges edges
// ahead, or each edge waits out a cache miss.

#include "spmm_entries.h"
#include "torchplug/core/vectorise.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace torchplug::spmm_detail {
namespace {

constexpr int64_t kPrefetchEdges = 16;

// Combines edge k's message into the row's accumulators (and min's and
// max's positions), compiled for AVX-512, AVX2 and baseline x86-64
// (core/vectorise.h): weight[0] * source[0, C) for one head (H = 1, C = F),
// or each head h's weight[h] * source[h * C, (h + 1) * C) in one call per
// edge (a call per head, through the clones' dispatch, cost more than the
// few features it combined). kC > 0 fixes C at compile time, for the widths
// of attention heads (8, 16), whose loops then vectorise whole.
template <typename Policy, int64_t kC, typename scalar_t, typename acc_t, typename held_t>
TORCHPLUG_VECTORISED_CLONES void add_message(acc_t* __restrict__ into, held_t* __restrict__ holder,
                                             const scalar_t* __restrict__ source,
                                             const scalar_t* __restrict__ weight, held_t k, int64_t H,
                                             int64_t runtime_C) {
  const int64_t C = kC > 0 ? kC : runtime_C;
  for (int64_t h = 0; h < H; ++h) {
    const acc_t w = weight != nullptr ? static_cast<acc_t>(weight[h]) : acc_t(1);
    for (int64_t f = h * C; f < (h + 1) * C; ++f) {
      const acc_t message = w * static_cast<acc_t>(source[f]);
      if constexpr (Policy::kHasArg) {  // selects, not a branch: the loop vectorises
        const bool wins = Policy::wins(message, into[f]);
        into[f] = wins ? message : into[f];
        holder[f] = wins ? k : holder[f];
      } else {
        Policy::combine(into[f], message);
      }
    }
  }
}

template <typename T>
inline void prefetch_row(const T* row, int64_t F) {
  constexpr int64_t kPerLine = 64 / sizeof(T);
  for (int64_t f = 0; f < F; f += kPerLine) __builtin_prefetch(row + f);
}

// held_t: the edge positions min and max keep, as wide as the math type
// where nnz allows, so that the select loop vectorises (a float compare
// selecting int64 positions did not: max ran at 6x sum's time).
template <typename Policy, typename scalar_t, typename held_t>
void spmm_rows(const SpmmProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t* rowptr = p.rowptr.const_data_ptr<int64_t>();
  const int64_t* col = p.col.const_data_ptr<int64_t>();
  const scalar_t* value = p.value.defined() ? p.value.const_data_ptr<scalar_t>() : nullptr;
  const scalar_t* x = p.x.const_data_ptr<scalar_t>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  int64_t* arg = Policy::kHasArg ? p.arg.mutable_data_ptr<int64_t>() : nullptr;
  const int64_t F = p.F, H = p.H, C = p.C;
  const int64_t average_row = std::max<int64_t>(1, p.nnz / std::max<int64_t>(p.M, 1));
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / (average_row * std::max<int64_t>(F, 1)));
  at::parallel_for(0, p.M, grain, [&](int64_t first, int64_t last) {
    std::vector<acc_t> acc(F);
    std::vector<held_t> held(Policy::kHasArg ? F : 0);
    for (int64_t row = first; row < last; ++row) {
      const int64_t start = rowptr[row], end = rowptr[row + 1];
      std::fill(acc.begin(), acc.end(), Policy::template identity<acc_t>());
      // The first edge holds an identity that nothing beats.
      std::fill(held.begin(), held.end(), static_cast<held_t>(start));
      acc_t* __restrict__ into = acc.data();
      held_t* __restrict__ holder = held.data();
      for (int64_t k = start; k < end; ++k) {
        if (k + kPrefetchEdges < p.nnz) prefetch_row(x + col[k + kPrefetchEdges] * F, F);
        const scalar_t* weight = value != nullptr ? value + k * H : nullptr;
        if (H > 1 && C == 8) {
          add_message<Policy, 8>(into, holder, x + col[k] * F, weight, static_cast<held_t>(k), H, C);
        } else if (H > 1 && C == 16) {
          add_message<Policy, 16>(into, holder, x + col[k] * F, weight, static_cast<held_t>(k), H, C);
        } else {
          add_message<Policy, 0>(into, holder, x + col[k] * F, weight, static_cast<held_t>(k), H, C);
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
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.x.scalar_type(), "torchplug::spmm",
                                  [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (sizeof(acc_t) == 4 && p.nnz <= std::numeric_limits<int32_t>::max()) {
      spmm_rows<Policy, scalar_t, int32_t>(p);
    } else {
      spmm_rows<Policy, scalar_t, int64_t>(p);
    }
  });
}

// The transpose by a counting sort: one pass counts each column's edges,
// a prefix sum places the columns, and a pass over the edges in CSR order
// drops each into its column's next slot, so that a column's edges come in
// increasing position. Sequential: O(nnz + N), on the CPU far below the
// sort it replaces. An edge whose col lies outside [0, N) (the entry
// refuses them on the CPU; the bucket keeps the kernel safe) goes last.
void transpose_kernel_cpu(const TransposeProblem& p) {
  const int64_t* rowptr = p.rowptr.const_data_ptr<int64_t>();
  const int64_t* col = p.col.const_data_ptr<int64_t>();
  int64_t* colptr = p.colptr.mutable_data_ptr<int64_t>();
  int64_t* row = p.row.mutable_data_ptr<int64_t>();
  int64_t* perm = p.perm.mutable_data_ptr<int64_t>();
  const int64_t N = p.N;
  const auto bucket = [&](int64_t k) { return col[k] >= 0 && col[k] < N ? col[k] : N; };
  std::vector<int64_t> next(N + 2, 0);  // counts, then each bucket's next slot
  for (int64_t k = 0; k < p.nnz; ++k) ++next[bucket(k) + 1];
  for (int64_t c = 0; c <= N; ++c) next[c + 1] += next[c];
  std::copy(next.begin(), next.begin() + N + 1, colptr);
  for (int64_t r = 0; r < p.M; ++r) {
    for (int64_t k = rowptr[r]; k < rowptr[r + 1]; ++k) {
      const int64_t slot = next[bucket(k)]++;
      row[slot] = r;
      perm[slot] = k;
    }
  }
}

namespace {

// Edges in parallel (a hub row is shared out like any other), each range
// starting at its first edge's row and walking rowptr from there; every
// edge's products (one per head) are its own, so the result does not depend
// on the threads.
template <typename scalar_t>
void sddmm_edges(const SddmmProblem& p) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t* rowptr = p.rowptr.const_data_ptr<int64_t>();
  const int64_t* col = p.col.const_data_ptr<int64_t>();
  const scalar_t* a = p.a.const_data_ptr<scalar_t>();
  const scalar_t* b = p.b.const_data_ptr<scalar_t>();
  scalar_t* out = p.out.mutable_data_ptr<scalar_t>();
  const int64_t F = p.F, H = p.H, C = p.C;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(F, 1));
  at::parallel_for(0, p.nnz, grain, [&](int64_t first, int64_t last) {
    // The row of edge `first`: the last r with rowptr[r] <= first.
    int64_t row = std::upper_bound(rowptr, rowptr + p.M + 1, first) - rowptr - 1;
    for (int64_t k = first; k < last; ++k) {
      while (rowptr[row + 1] <= k) ++row;
      if (k + kPrefetchEdges < last) prefetch_row(b + col[k + kPrefetchEdges] * F, F);
      for (int64_t h = 0; h < H; ++h) {
        acc_t product = core::dot(a + row * F + h * C, b + col[k] * F + h * C, C);
        if (p.mean) product /= static_cast<acc_t>(rowptr[row + 1] - rowptr[row]);
        out[k * H + h] = static_cast<scalar_t>(product);
      }
    }
  });
}

}  // namespace

void sddmm_kernel_cpu(const SddmmProblem& p) {
  if (p.nnz == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.a.scalar_type(), "torchplug::sddmm",
                                  [&] { sddmm_edges<scalar_t>(p); });
}

namespace {

struct CpuKernels {
  static void check(const char* op, const char* arg, const at::Tensor& t) { core::check_cpu(op, arg, t); }
  template <typename Policy>
  static void run(const SpmmProblem& p) {
    spmm_kernel_cpu<Policy>(p);
  }
  static void transpose(const TransposeProblem& p) { transpose_kernel_cpu(p); }
  static void sddmm(const SddmmProblem& p) { sddmm_kernel_cpu(p); }
};

}  // namespace
}  // namespace torchplug::spmm_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  torchplug::spmm_detail::SpmmEntries<torchplug::spmm_detail::CpuKernels>::register_all(m);
}
