// The attention plugin on the CPU: the fused kernels, and the registration of
// every entry point (attention_entries.h). Rows (gatv2's backward also
// columns, over the transpose) in parallel; each output row is summed in its
// edges' order, so results do not depend on the thread count. Scores and
// gatv2's activations are recomputed where they are needed, never stored.

#include "attention_entries.h"
#include "attention_softmax.h"
#include "torchplug/core/vectorise.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace torchplug::attention_detail {
namespace {

// Rows of about this many E x H x C terms per parallel task.
constexpr int64_t kTermsPerTask = int64_t{1} << 15;

int64_t grain(const EdgeProblem& p, int64_t rows) {
  const int64_t nnz = p.col.size(0);
  const int64_t per_row = std::max<int64_t>(1, nnz / std::max<int64_t>(rows, 1)) * p.H * p.C;
  return std::max<int64_t>(1, kTermsPerTask / per_row);
}

// gatv2's terms att[f] * act(src[f] + dst[f]) (dot's src[f] * dst[f]) of
// one edge, f over H * C: loops the compiler vectorises.
template <typename scalar_t>
TORCHPLUG_VECTORISED_CLONES void edge_terms(at::opmath_type<scalar_t>* __restrict__ out,
                                            const scalar_t* __restrict__ s, const scalar_t* __restrict__ d,
                                            const scalar_t* __restrict__ att, int64_t F,
                                            at::opmath_type<scalar_t> slope) {
  using T = at::opmath_type<scalar_t>;
  if (att == nullptr) {
    for (int64_t f = 0; f < F; ++f) out[f] = static_cast<T>(s[f]) * static_cast<T>(d[f]);
    return;
  }
  for (int64_t f = 0; f < F; ++f) {
    const T z = static_cast<T>(s[f]) + static_cast<T>(d[f]);
    out[f] = static_cast<T>(att[f]) * (z > T(0) ? z : z * slope);
  }
}

// A row's softmax per head over its scores [length, H], in place: each
// becomes exp(score - max), the max over the row's scores of its head (a NaN
// wins), and inv[h] the normaliser of (max, their sum) (summed in double:
// long rows do not drift), so that SoftmaxProgram's rules hold: a head of
// -inf scores weighs 0 everywhere, a +inf or a NaN makes it NaN. One
// exponential per score, in T (float for float32): weights are exp * inv.
template <typename T>
TORCHPLUG_VECTORISED_CLONES void exp_and_normaliser(T* __restrict__ scores, int64_t length, int64_t H,
                                                    T* __restrict__ shift, T* __restrict__ inv,
                                                    double* __restrict__ sums) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  std::fill(shift, shift + H, kNegInf);
  for (int64_t j = 0; j < length; ++j) {
    for (int64_t h = 0; h < H; ++h) {
      const T x = scores[j * H + h];
      shift[h] = x > shift[h] || x != x ? x : shift[h];
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    inv[h] = shift[h];  // the max, kept for the normaliser
    shift[h] = shift[h] == kNegInf ? T(0) : shift[h];  // every score -inf: exp gives 0, not NaN
    sums[h] = 0;
  }
  for (int64_t j = 0; j < length; ++j) {
    for (int64_t h = 0; h < H; ++h) {
      const T e = std::exp(scores[j * H + h] - shift[h]);
      scores[j * H + h] = e;
      sums[h] += static_cast<double>(e);
    }
  }
  for (int64_t h = 0; h < H; ++h) inv[h] = static_cast<T>(normaliser(core::MaxExpSum<double>{inv[h], sums[h]}).sum);
}

// Each row: its scores in T, edge by edge (a source row read once: gat's H
// values, gatv2's and dot's H * C terms from edge_terms), then per head the
// softmax (weights, into out), or with kGrad the scores' gradient from the
// weights' gradient `grad`:
//   gs[k] = alpha[k] * (grad[k] - sum over the row of alpha * grad)
// (gat: times the activation's slope at its value before it).
template <typename scalar_t, bool kGrad>
void softmax_rows(const EdgeProblem& p, const at::Tensor& grad_, const at::Tensor& out_) {
  using T = at::opmath_type<scalar_t>;
  using out_t = std::conditional_t<kGrad, T, scalar_t>;
  const int64_t* rowptr = p.rowptr.const_data_ptr<int64_t>();
  const int64_t* col = p.col.const_data_ptr<int64_t>();
  const scalar_t* grad = kGrad ? grad_.const_data_ptr<scalar_t>() : nullptr;
  out_t* out = out_.mutable_data_ptr<out_t>();
  const EdgeScore<scalar_t> score = edge_score<scalar_t>(p);
  const int64_t H = p.H, C = p.C, F = H * C;
  const bool keep_pre = kGrad && p.kind == Score::kGat;
  const scalar_t* att = p.kind == Score::kGatV2 ? score.att : nullptr;
  at::parallel_for(0, p.M, grain(p, p.M), [&](int64_t first, int64_t last) {
    std::vector<T> scores, pre, terms(F), shift(H), inv(H);
    std::vector<double> sums(H), dots(H);
    for (int64_t r = first; r < last; ++r) {
      const int64_t begin = rowptr[r], length = rowptr[r + 1] - begin;
      scores.resize(length * H);
      if (keep_pre) pre.resize(length * H);
      for (int64_t j = 0; j < length; ++j) {
        const int64_t c = col[begin + j];
        T* row_scores = scores.data() + j * H;
        if (p.kind == Score::kGat) {
          for (int64_t h = 0; h < H; ++h) {
            const T z = static_cast<T>(score.src[c * H + h]) + static_cast<T>(score.dst[r * H + h]);
            if (keep_pre) pre[j * H + h] = z;
            row_scores[h] = score.act(z);
          }
          continue;
        }
        edge_terms(terms.data(), score.src + c * F, score.dst + r * F, att, F, score.slope);
        for (int64_t h = 0; h < H; ++h) {
          T sum = 0;
          for (int64_t i = h * C; i < (h + 1) * C; ++i) sum += terms[i];
          row_scores[h] = p.kind == Score::kDot ? sum * score.scale : sum;
        }
      }
      exp_and_normaliser(scores.data(), length, H, shift.data(), inv.data(), sums.data());
      if constexpr (!kGrad) {
        for (int64_t j = 0; j < length * H; ++j) out[begin * H + j] = static_cast<out_t>(scores[j] * inv[j % H]);
      } else {
        std::fill(dots.begin(), dots.end(), 0.0);
        for (int64_t j = 0; j < length * H; ++j) {
          scores[j] *= inv[j % H];  // now alpha
          dots[j % H] += static_cast<double>(scores[j]) * static_cast<double>(grad[begin * H + j]);
        }
        for (int64_t j = 0; j < length * H; ++j) {
          T gs = scores[j] * static_cast<T>(static_cast<double>(grad[begin * H + j]) - dots[j % H]);
          if (keep_pre && !(pre[j] > 0)) gs *= static_cast<T>(p.negative_slope);
          out[begin * H + j] = static_cast<out_t>(gs);
        }
      }
    }
  });
}

// The gradient of edge k's activations at feature i: grad[k, h] * att[i] *
// act'(z), added into `into` ([H * C]); with `att_into`, grad * act(z) too.
template <typename scalar_t, typename acc_t>
TORCHPLUG_VECTORISED_CLONES void add_edge(acc_t* __restrict__ into, acc_t* __restrict__ att_into,
                                          const scalar_t* __restrict__ s, const scalar_t* __restrict__ d,
                                          const scalar_t* __restrict__ att, const acc_t* __restrict__ grad, int64_t H,
                                          int64_t C, acc_t slope) {
  for (int64_t h = 0; h < H; ++h) {
    const acc_t g = grad[h];
    for (int64_t i = h * C; i < (h + 1) * C; ++i) {
      const acc_t z = static_cast<acc_t>(s[i]) + static_cast<acc_t>(d[i]);
      into[i] += g * static_cast<acc_t>(att[i]) * (z > acc_t(0) ? acc_t(1) : slope);
    }
    if (att_into == nullptr) continue;
    for (int64_t i = h * C; i < (h + 1) * C; ++i) {
      const acc_t z = static_cast<acc_t>(s[i]) + static_cast<acc_t>(d[i]);
      att_into[i] += g * (z > acc_t(0) ? z : z * slope);
    }
  }
}

template <typename scalar_t>
void backward_rows(const EdgeProblem& p, const at::Tensor& grad_, const at::Tensor& colptr_,
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

  static void softmax(const EdgeProblem& p, const at::Tensor& out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::edge_attention_softmax",
                                    [&] { softmax_rows<scalar_t, false>(p, at::Tensor(), out); });
  }

  static void score_grad(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(),
                                    "torchplug::edge_attention_score_grad",
                                    [&] { softmax_rows<scalar_t, true>(p, grad, out); });
  }

  static void gatv2_backward(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& colptr,
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
