// The attention plugin on the CPU: gatv2's fused kernels, and the
// registration of every entry point (attention_entries.h). Rows (the backward
// also columns, over the transpose) in parallel; each output row is summed in
// its edges' order in the math type, so results do not depend on the thread
// count. The activation z = src[c] + dst[r] of an edge is recomputed where it
// is needed, never stored.

#include "attention_entries.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace torchplug::attention_detail {
namespace {

// Rows of about this many E x H x C terms per parallel task.
constexpr int64_t kTermsPerTask = int64_t{1} << 15;

int64_t grain(const Gatv2Problem& p, int64_t rows) {
  const int64_t nnz = p.col.size(0);
  const int64_t per_row = std::max<int64_t>(1, nnz / std::max<int64_t>(rows, 1)) * p.H * p.C;
  return std::max<int64_t>(1, kTermsPerTask / per_row);
}

template <typename scalar_t>
void scores_rows(const Gatv2Problem& p, const at::Tensor& out_) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t* rowptr = p.rowptr.const_data_ptr<int64_t>();
  const int64_t* col = p.col.const_data_ptr<int64_t>();
  const scalar_t* src = p.src.const_data_ptr<scalar_t>();
  const scalar_t* dst = p.dst.const_data_ptr<scalar_t>();
  const scalar_t* att = p.att.const_data_ptr<scalar_t>();
  scalar_t* out = out_.mutable_data_ptr<scalar_t>();
  const int64_t H = p.H, C = p.C, F = H * C;
  const acc_t slope = static_cast<acc_t>(p.negative_slope);
  at::parallel_for(0, p.M, grain(p, p.M), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const scalar_t* d = dst + r * F;
      for (int64_t k = rowptr[r]; k < rowptr[r + 1]; ++k) {
        const scalar_t* s = src + col[k] * F;
        for (int64_t h = 0; h < H; ++h) {
          acc_t score = 0;
          for (int64_t i = h * C; i < (h + 1) * C; ++i) {
            const acc_t z = static_cast<acc_t>(s[i]) + static_cast<acc_t>(d[i]);
            score += static_cast<acc_t>(att[i]) * (z > 0 ? z : z * slope);
          }
          out[k * H + h] = static_cast<scalar_t>(score);
        }
      }
    }
  });
}

// The gradient of edge k's activations at feature i: grad[k, h] * att[i] *
// act'(z), added into `into` ([H * C]); with `att_into`, grad * act(z) too.
template <typename scalar_t, typename acc_t>
inline void add_edge(acc_t* into, acc_t* att_into, const scalar_t* s, const scalar_t* d, const scalar_t* att,
                     const acc_t* grad, int64_t H, int64_t C, acc_t slope) {
  for (int64_t h = 0; h < H; ++h) {
    const acc_t g = grad[h];
    for (int64_t i = h * C; i < (h + 1) * C; ++i) {
      const acc_t z = static_cast<acc_t>(s[i]) + static_cast<acc_t>(d[i]);
      const bool positive = z > 0;
      into[i] += g * static_cast<acc_t>(att[i]) * (positive ? acc_t(1) : slope);
      if (att_into != nullptr) att_into[i] += g * (positive ? z : z * slope);
    }
  }
}

template <typename scalar_t>
void backward_rows(const Gatv2Problem& p, const at::Tensor& grad_, const at::Tensor& colptr_,
                   const at::Tensor& row_, const at::Tensor& perm_, const at::Tensor& grad_src,
                   const at::Tensor& grad_dst, const at::Tensor& partials) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t* rowptr = p.rowptr.const_data_ptr<int64_t>();
  const int64_t* col = p.col.const_data_ptr<int64_t>();
  const scalar_t* src = p.src.const_data_ptr<scalar_t>();
  const scalar_t* dst = p.dst.const_data_ptr<scalar_t>();
  const scalar_t* att = p.att.const_data_ptr<scalar_t>();
  const acc_t* grad = grad_.const_data_ptr<acc_t>();
  const int64_t H = p.H, F = p.H * p.C;
  const acc_t slope = static_cast<acc_t>(p.negative_slope);

  // dst's gradient and att's partials: blocks of kGatv2RowsPerPartial rows.
  if (grad_dst.defined() || partials.defined()) {
    scalar_t* out = grad_dst.defined() ? grad_dst.mutable_data_ptr<scalar_t>() : nullptr;
    acc_t* att_sums = partials.defined() ? partials.mutable_data_ptr<acc_t>() : nullptr;
    const int64_t blocks = (p.M + kGatv2RowsPerPartial - 1) / kGatv2RowsPerPartial;
    const int64_t block_grain = std::max<int64_t>(1, grain(p, p.M) / kGatv2RowsPerPartial);
    at::parallel_for(0, blocks, block_grain, [&](int64_t first, int64_t last) {
      std::vector<acc_t> sums(F);
      for (int64_t b = first; b < last; ++b) {
        acc_t* att_block = att_sums != nullptr ? att_sums + b * F : nullptr;
        for (int64_t r = b * kGatv2RowsPerPartial; r < std::min(p.M, (b + 1) * kGatv2RowsPerPartial); ++r) {
          std::fill(sums.begin(), sums.end(), acc_t(0));
          for (int64_t k = rowptr[r]; k < rowptr[r + 1]; ++k) {
            add_edge(sums.data(), att_block, src + col[k] * F, dst + r * F, att, grad + k * H, H, p.C, slope);
          }
          if (out != nullptr) {
            for (int64_t i = 0; i < F; ++i) out[r * F + i] = static_cast<scalar_t>(sums[i]);
          }
        }
      }
    });
  }

  // src's gradient: each column's edges over the transpose, in CSR order.
  if (grad_src.defined()) {
    const int64_t* colptr = colptr_.const_data_ptr<int64_t>();
    const int64_t* row = row_.const_data_ptr<int64_t>();
    const int64_t* perm = perm_.const_data_ptr<int64_t>();
    scalar_t* out = grad_src.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, p.N, grain(p, p.N), [&](int64_t first, int64_t last) {
      std::vector<acc_t> sums(F);
      for (int64_t c = first; c < last; ++c) {
        std::fill(sums.begin(), sums.end(), acc_t(0));
        for (int64_t j = colptr[c]; j < colptr[c + 1]; ++j) {
          add_edge<scalar_t, acc_t>(sums.data(), nullptr, src + c * F, dst + row[j] * F, att, grad + perm[j] * H, H,
                                    p.C, slope);
        }
        for (int64_t i = 0; i < F; ++i) out[c * F + i] = static_cast<scalar_t>(sums[i]);
      }
    });
  }
}

struct CpuKernels {
  static void check(const char* op, const char* arg, const at::Tensor& t) { core::check_cpu(op, arg, t); }

  static void gatv2_scores(const Gatv2Problem& p, const at::Tensor& out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(),
                                    "torchplug::edge_attention_gatv2_scores", [&] { scores_rows<scalar_t>(p, out); });
  }

  static void gatv2_backward(const Gatv2Problem& p, const at::Tensor& grad, const at::Tensor& colptr,
                             const at::Tensor& row, const at::Tensor& perm, const at::Tensor& grad_src,
                             const at::Tensor& grad_dst, const at::Tensor& partials) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(),
                                    "torchplug::edge_attention_gatv2_backward", [&] {
                                      backward_rows<scalar_t>(p, grad, colptr, row, perm, grad_src, grad_dst,
                                                              partials);
                                    });
  }
};

}  // namespace
}  // namespace torchplug::attention_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  torchplug::attention_detail::AttentionEntries<torchplug::attention_detail::CpuKernels>::register_all(m);
}
