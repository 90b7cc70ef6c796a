#pragma once

// Internal to the attention plugin: the score functions, the checks, and the
// forward shared by the device kernels and the Autograd kernel. Built from
// other plugins' ops through the dispatcher (DEPENDS in CMakeLists.txt).

#include "attention_schema.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <c10/util/string_view.h>

#include <array>
#include <optional>
#include <tuple>

namespace torchplug::attention_detail {

using OptTensor = std::optional<at::Tensor>;

enum class Score { kGat, kGatV2, kDot };

// The score's name in the schema: "gat", "gatv2" or "dot".
const char* score_name(Score score);

// The op's arguments, checked; `score` parsed.
struct Args {
  at::Tensor rowptr, col, src, dst;
  OptTensor att;
  Score score;
  double negative_slope, scale, dropout;
  OptTensor colptr, row, perm;
};

// Checks shapes, dtypes, devices and the options (on the CPU and in checked
// mode rowptr's and col's values too). Errors name the op and the argument.
Args check_args(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src, const at::Tensor& dst,
                c10::string_view score, const OptTensor& att, double negative_slope, double scale, double dropout,
                const OptTensor& colptr, const OptTensor& row, const OptTensor& perm, bool values);

// The scores [nnz, H] before the softmax, from differentiable ops for autograd
// to record (the double-backward recompute): gathers whose backward is a
// segment sum (no atomics).
at::Tensor differentiable_scores(const Args& a);

// The fused kernels' inputs (attention_entries.h, the device files): src,
// dst (and gatv2's att) contiguous; C is 1 for gat.
struct EdgeProblem {
  at::Tensor rowptr, col, src, dst, att;
  Score kind;
  double negative_slope, scale;
  int64_t M, N, H, C;
};

// gatv2's backward sums att's gradient over fixed blocks of this many rows
// first, then over the blocks: the same order on every device and thread count.
constexpr int64_t kGatv2RowsPerPartial = 32;

// The fused kernels through the dispatcher: the weights before dropout, the
// scores' gradient from the weights' (math type), gatv2's src, dst, att
// gradients (`wanted`) from the scores'.
at::Tensor fused_softmax(const Args& a);
at::Tensor score_grad(const at::Tensor& grad, const Args& a);
std::tuple<at::Tensor, at::Tensor, at::Tensor> gatv2_backward(const at::Tensor& grad, const Args& a,
                                                              const OptTensor& colptr, const OptTensor& row,
                                                              const OptTensor& perm, std::array<bool, 3> wanted);

// The forward: the softmax of each row's scores, then dropout.
at::Tensor forward(const Args& a, const std::optional<at::Generator>& generator);

// edge_attention itself, through the dispatcher.
at::Tensor call_edge_attention(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                               const at::Tensor& dst, c10::string_view score, const OptTensor& att,
                               double negative_slope, double scale, double dropout,
                               const std::optional<at::Generator>& generator, const OptTensor& colptr,
                               const OptTensor& row, const OptTensor& perm);

// The ops it is built from, through the dispatcher.
at::Tensor softmax_csr(const at::Tensor& src, const at::Tensor& indptr);
at::Tensor gather_csr(const at::Tensor& src, const at::Tensor& indptr, const c10::SymInt& size);
at::Tensor gather_coo(const at::Tensor& src, const at::Tensor& index);
at::Tensor segment_sum_csr(const at::Tensor& src, const at::Tensor& indptr);
at::Tensor sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                 int64_t heads);
at::Tensor spmm_sum(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value, const at::Tensor& x);
std::tuple<at::Tensor, at::Tensor, at::Tensor> transpose(const at::Tensor& rowptr, const at::Tensor& col,
                                                         const c10::SymInt& num_cols);

}  // namespace torchplug::attention_detail
