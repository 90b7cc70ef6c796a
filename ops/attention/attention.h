#pragma once

// Attention over a graph's edges without the E x H x C messages: the weights
//   alpha[k, h] = softmax over the edges k' of row r of score[k', h]
// for the edges k of each row r of a CSR adjacency (rowptr, col) of M rows
// and N columns, then optional dropout. Multiplied into the messages by
// spmm_sum with value = alpha ([nnz, H] weighs x [N, H, C] head by head).
//
// Three score functions, for an edge k from column c = col[k] to row r:
//   "gat"    act(src[c, h] + dst[r, h])                  src [N, H], dst [M, H]
//   "gatv2"  sum_i att[h, i] * act(src[c, h, i] + dst[r, h, i])
//                                                         src [N, H, C], dst [M, H, C], att [H, C]
//   "dot"    scale * dst[r, h] . src[c, h]               src (keys) [N, H, C], dst (queries) [M, H, C]
// act is leaky_relu with negative_slope (1 for the identity). float16 and
// bfloat16 are computed in float32 where the ops it is built from do.
//
// A score of -inf leaves its edge out (weight 0); a row whose scores are all
// -inf gets zeros, and a NaN makes its own row NaN. With dropout p > 0 each
// weight is kept with probability 1 - p (drawn from `generator`, or the
// default one) and scaled by 1 / (1 - p); callers pass 0 outside training.
//
// Differentiable in src, dst and att, double backward included. The
// gradient to src runs over the CSR's transpose, built every call unless the
// caller passes the one spmm_transpose built.

#include "torchplug/ops/spmm.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>

namespace torchplug {

at::Tensor edge_attention(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                          const at::Tensor& dst, std::string_view score = "gat",
                          const std::optional<at::Tensor>& att = std::nullopt, double negative_slope = 0.2,
                          double scale = 1.0, double dropout = 0.0,
                          const std::optional<at::Generator>& generator = std::nullopt,
                          const std::optional<SpmmTranspose>& transpose = std::nullopt);

}  // namespace torchplug
