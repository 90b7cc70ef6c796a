#pragma once

// One row's attention, written once for the CPU and CUDA kernels of
// edge_attention_softmax (the scores and their softmax per head, one pass to
// reduce and one to write) and edge_attention_score_grad (the same, then the
// gradient through the softmax). Nothing is stored between the passes: each
// recomputes its edges' scores, which read src[col[k]] and dst[r] (C values
// per head for gatv2 and dot). The reduction is core's MaxExpSum, as in
// softmax_csr: -inf leaves its edge out, a row of -inf gives 0, a NaN makes
// its row NaN.

#include "attention_kernel.h"
#include "torchplug/core/reduce/row_program.h"

#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>

namespace torchplug::attention_detail {

// The score of an edge from column c to row r at head h, in the math type T.
template <typename scalar_t>
struct EdgeScore {
  using T = at::opmath_type<scalar_t>;
  Score kind;
  const scalar_t* src;  // [N, H] (gat) or [N, H, C]
  const scalar_t* dst;  // [M, H] or [M, H, C]
  const scalar_t* att;  // [H, C] (gatv2)
  int64_t H, C;
  T slope, scale;

  C10_HOST_DEVICE T act(T z) const { return z > T(0) ? z : z * slope; }

  // The score, and in *pre gat's value before the activation.
  C10_HOST_DEVICE T operator()(int64_t c, int64_t r, int64_t h, T* pre = nullptr) const {
    if (kind == Score::kGat) {
      const T z = static_cast<T>(src[c * H + h]) + static_cast<T>(dst[r * H + h]);
      if (pre != nullptr) *pre = z;
      return act(z);
    }
    const scalar_t* s = src + (c * H + h) * C;
    const scalar_t* d = dst + (r * H + h) * C;
    T sum = 0;
    if (kind == Score::kGatV2) {
      for (int64_t i = 0; i < C; ++i) {
        sum += static_cast<T>(att[h * C + i]) * act(static_cast<T>(s[i]) + static_cast<T>(d[i]));
      }
      return sum;
    }
    for (int64_t i = 0; i < C; ++i) sum += static_cast<T>(s[i]) * static_cast<T>(d[i]);
    return sum * scale;
  }
};

template <typename scalar_t>
EdgeScore<scalar_t> edge_score(const EdgeProblem& p) {
  using T = at::opmath_type<scalar_t>;
  return {p.kind,
          p.src.const_data_ptr<scalar_t>(),
          p.dst.const_data_ptr<scalar_t>(),
          p.att.defined() ? p.att.const_data_ptr<scalar_t>() : nullptr,
          p.H,
          p.C,
          static_cast<T>(p.negative_slope),
          static_cast<T>(p.scale)};
}

// The softmax's (max, 1 / sum) from a row's reduced state, as SoftmaxProgram
// prepares it: a row of -inf gives weights 0, a +inf or a NaN gives NaN.
template <typename T>
C10_HOST_DEVICE inline core::MaxExpSum<T> normaliser(core::MaxExpSum<T> s) {
  core::SoftmaxProgram<T> program;
  program.prepare(s);
  return s;
}

template <typename T>
C10_HOST_DEVICE inline T weight(const core::MaxExpSum<T>& n, T score) {
  return core::SoftmaxProgram<T>{}.emit(n, score, score);
}

}  // namespace torchplug::attention_detail
