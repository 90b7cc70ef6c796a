// edge_attention: definition (schemas in attention_schema.h), C++ API, input
// checks, the score functions and the forward, and the Meta kernels. The
// device files (attention_cpu.cpp, attention_cuda.cu) register the entry
// points of attention_entries.h. The forward is the same program on every
// device: the fused ops it calls (gather_coo, gather_csr, sddmm, softmax_csr,
// gatv2's scores) carry the device kernels, and no step builds E x H x C values.
//   edge_attention(Tensor rowptr, Tensor col, Tensor src, Tensor dst, str score="gat", Tensor? att=None,
//                  float negative_slope=0.2, float scale=1.0, float dropout=0.0, Generator? generator=None,
//                  Tensor? colptr=None, Tensor? row=None, Tensor? perm=None) -> Tensor   [nnz, H]

#include "attention.h"

#include "attention_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/leaky_relu.h>

#include <string>

namespace torchplug {
namespace attention_detail {
const char* score_name(Score score) {
  return score == Score::kGat ? "gat" : score == Score::kGatV2 ? "gatv2" : "dot";
}

namespace {

const char* op_name() { return kEdgeAttention.name().c_str(); }

Score parse_score(c10::string_view score) {
  if (score == "gat") return Score::kGat;
  if (score == "gatv2") return Score::kGatV2;
  if (score == "dot") return Score::kDot;
  TORCH_CHECK(false, op_name(), ": argument 'score' must be \"gat\", \"gatv2\" or \"dot\", got \"",
              std::string(score), "\"");
}

// src, dst (and att) of the score's shapes: [N, H] and [M, H] for gat,
// [N, H, C] and [M, H, C] (att [H, C]) for gatv2 and dot.
void check_features(Score score, const at::Tensor& rowptr, const at::Tensor& src, const at::Tensor& dst,
                    const OptTensor& att) {
  const char* op = op_name();
  const int64_t dims = score == Score::kGat ? 2 : 3;
  const char* shape = score == Score::kGat ? "[N, H]" : "[N, H, C]";
  TORCH_CHECK(src.dim() == dims, op, ": argument 'src' of shape ", src.sym_sizes(), " must be ", shape,
              " for score \"", score_name(score), "\"");
  const auto M = rowptr.sym_size(0) - 1;
  TORCH_CHECK(dst.dim() == dims && dst.sym_size(0) == M && dst.sym_sizes().slice(1) == src.sym_sizes().slice(1), op,
              ": argument 'dst' of shape ", dst.sym_sizes(), " must be [M, ", src.sym_sizes().slice(1),
              "] with M = rowptr.size(0) - 1 = ", M, " and src's trailing shape");
  if (score == Score::kGatV2) {
    TORCH_CHECK(att.has_value(), op, ": argument 'att' [H, C] is required for score \"gatv2\"");
    core::check_same_device(op, {TORCHPLUG_ARG(src), {"att", &*att}});
    core::check_same_dtype(op, TORCHPLUG_ARG(src), {"att", &*att});
    TORCH_CHECK(att->sym_sizes() == src.sym_sizes().slice(1), op, ": argument 'att' of shape ", att->sym_sizes(),
                " must be [H, C] = ", src.sym_sizes().slice(1));
  } else {
    TORCH_CHECK(!att.has_value(), op, ": argument 'att' is only taken by score \"gatv2\"");
  }
}

// A transpose given: all three of spmm_transpose's outputs, colptr [N + 1],
// row and perm [nnz]. Their values are checked by the ops that read them.
void check_transpose(const at::Tensor& col, const c10::SymInt& N, const OptTensor& colptr, const OptTensor& row,
                     const OptTensor& perm) {
  const char* op = op_name();
  const int given = colptr.has_value() + row.has_value() + perm.has_value();
  if (given == 0) return;
  TORCH_CHECK(given == 3, op, ": arguments 'colptr', 'row' and 'perm' (the transpose spmm_transpose builds) ",
              "must be given together, got ", given, " of them");
  core::check_same_device(op, {TORCHPLUG_ARG(col), {"colptr", &*colptr}, {"row", &*row}, {"perm", &*perm}});
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"colptr", &*colptr}, {"row", &*row},
                                {"perm", &*perm}}) {
    core::check_index_dtype(op, name, *t);
    const auto want = t == &*colptr ? N + 1 : col.sym_size(0);
    TORCH_CHECK(t->dim() == 1 && t->sym_size(0) == want, op, ": argument '", name, "' of shape ", t->sym_sizes(),
                " must be [", want, "] (", t == &*colptr ? "N + 1 with N = src.size(0)" : "nnz = col.size(0)",
                ")");
  }
}

}  // namespace

Args check_args(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src, const at::Tensor& dst,
                c10::string_view score, const OptTensor& att, double negative_slope, double scale, double dropout,
                const OptTensor& colptr, const OptTensor& row, const OptTensor& perm, bool values) {
  const char* op = op_name();
  const Score kind = parse_score(score);
  core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(src), TORCHPLUG_ARG(dst)});
  core::check_index_dtype(op, "rowptr", rowptr);
  core::check_index_dtype(op, "col", col);
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.sym_size(0) >= 1, op,
              ": argument 'rowptr' must be 1-D with at least one value, got shape ", rowptr.sym_sizes());
  TORCH_CHECK(col.dim() == 1, op, ": argument 'col' must be 1-D, got shape ", col.sym_sizes());
  core::check_dtype_in(op, "src", src, kDtypes);
  core::check_same_dtype(op, TORCHPLUG_ARG(src), TORCHPLUG_ARG(dst));
  check_features(kind, rowptr, src, dst, att);
  TORCH_CHECK(dropout >= 0 && dropout < 1, op, ": argument 'dropout' must be in [0, 1), got ", dropout);
  check_transpose(col, src.sym_size(0), colptr, row, perm);
  if (values && core::validates_indices(rowptr.device())) {
    core::check_offsets(op, "rowptr", rowptr, col.size(0), "nnz = col.size(0)");
    core::check_index_range(op, "col", core::index_bounds(col), src.size(0));
  }
  return {rowptr, col, src, dst, att, kind, negative_slope, scale, dropout, colptr, row, perm};
}

namespace {

// src[col] [nnz, ...] for the double-backward recompute: the gather by the
// transpose's columns put back in CSR order, whose backward is a segment sum
// and a gather, not index_select's atomics.
at::Tensor gather_columns(const Args& a, const at::Tensor& src) {
  at::Tensor colptr, row, perm;
  if (a.colptr) {
    colptr = *a.colptr, perm = *a.perm;
  } else {
    std::tie(colptr, row, perm) = transpose(a.rowptr, a.col, src.sym_size(0));
  }
  const at::Tensor by_column = gather_csr(src, colptr, a.col.sym_size(0));
  return at::zeros_like(by_column).index_copy(0, perm, by_column);
}

}  // namespace

at::Tensor differentiable_scores(const Args& a) {
  const auto nnz = a.col.sym_size(0);
  switch (a.score) {
    case Score::kGat:
      return at::leaky_relu(gather_columns(a, a.src) + gather_csr(a.dst, a.rowptr, nnz), a.negative_slope);
    case Score::kGatV2: {
      const at::Tensor z = gather_columns(a, a.src) + gather_csr(a.dst, a.rowptr, nnz);  // [nnz, H, C]
      return (at::leaky_relu(z, a.negative_slope) * *a.att).sum(-1);
    }
    case Score::kDot: {
      const int64_t H = a.src.size(1);
      return sddmm(a.rowptr, a.col, a.dst, a.src, H).view_symint({nnz, H}) * a.scale;
    }
  }
  TORCH_CHECK(false, op_name(), ": unknown score");
}

at::Tensor forward(const Args& a, const std::optional<at::Generator>& generator) {
  const at::Tensor alpha = fused_softmax(a);
  if (a.dropout == 0) return alpha;
  // Drawn in float32 whatever the dtype: one generator state, one mask.
  const at::Tensor keep = at::empty(alpha.sizes(), alpha.options().dtype(at::kFloat))
                              .bernoulli_(1 - a.dropout, generator)
                              .to(alpha.scalar_type());
  return alpha * keep * (1 / (1 - a.dropout));
}

at::Tensor call_edge_attention(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                               const at::Tensor& dst, c10::string_view score, const OptTensor& att,
                               double negative_slope, double scale, double dropout,
                               const std::optional<at::Generator>& generator, const OptTensor& colptr,
                               const OptTensor& row, const OptTensor& perm) {
  static const auto op = core::find_op<at::Tensor(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view,
      const OptTensor&, double, double, double, const std::optional<at::Generator>&, const OptTensor&,
      const OptTensor&, const OptTensor&)>(kEdgeAttention);
  return op.call(rowptr, col, src, dst, score, att, negative_slope, scale, dropout, generator, colptr, row, perm);
}

// ---- the ops it is built from ------------------------------------------------------

at::Tensor fused_softmax(const Args& a) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               c10::string_view, const OptTensor&, double, double)>(kSoftmax);
  return op.call(a.rowptr, a.col, a.src, a.dst, score_name(a.score), a.att, a.negative_slope, a.scale);
}

at::Tensor score_grad(const at::Tensor& grad, const Args& a) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               const at::Tensor&, c10::string_view, const OptTensor&, double, double)>(kScoreGrad);
  return op.call(grad, a.rowptr, a.col, a.src, a.dst, score_name(a.score), a.att, a.negative_slope, a.scale);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gatv2_backward(const at::Tensor& grad, const Args& a,
                                                              const OptTensor& colptr, const OptTensor& row,
                                                              const OptTensor& perm, std::array<bool, 3> wanted) {
  static const auto op = core::find_op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      const at::Tensor&, double, const OptTensor&, const OptTensor&, const OptTensor&, std::array<bool, 3>)>(
      kGatv2Backward);
  return op.call(grad, a.rowptr, a.col, a.src, a.dst, *a.att, a.negative_slope, colptr, row, perm, wanted);
}

at::Tensor softmax_csr(const at::Tensor& src, const at::Tensor& indptr) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>("torchplug::softmax_csr");
  return op.call(src, indptr, 0);
}

at::Tensor gather_csr(const at::Tensor& src, const at::Tensor& indptr, const c10::SymInt& size) {
  static const auto op = core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, std::optional<c10::SymInt>)>(
      "torchplug::gather_csr");
  return op.call(src, indptr, size);
}

at::Tensor gather_coo(const at::Tensor& src, const at::Tensor& index) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>("torchplug::gather_coo");
  return op.call(src, index);
}

at::Tensor segment_sum_csr(const at::Tensor& src, const at::Tensor& indptr) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>("torchplug::segment_sum_csr");
  return op.call(src, indptr);
}

at::Tensor sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                 int64_t heads) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, bool,
                               const OptTensor&, const OptTensor&, const OptTensor&, int64_t)>("torchplug::sddmm");
  return op.call(rowptr, col, a, b, false, std::nullopt, std::nullopt, std::nullopt, heads);
}

at::Tensor spmm_sum(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& value, const at::Tensor& x) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, const at::Tensor&,
                               const OptTensor&, const OptTensor&, const OptTensor&)>("torchplug::spmm_sum");
  return op.call(rowptr, col, value, x, std::nullopt, std::nullopt, std::nullopt);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> transpose(const at::Tensor& rowptr, const at::Tensor& col,
                                                         const c10::SymInt& num_cols) {
  static const auto op =
      core::find_op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                   c10::SymInt)>("torchplug::spmm_transpose");
  return op.call(rowptr, col, num_cols);
}

namespace {

at::Tensor edge_attention_meta(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                               const at::Tensor& dst, c10::string_view score, const OptTensor& att,
                               double negative_slope, double scale, double dropout,
                               const std::optional<at::Generator>& /*generator*/, const OptTensor& colptr,
                               const OptTensor& row, const OptTensor& perm) {
  check_args(rowptr, col, src, dst, score, att, negative_slope, scale, dropout, colptr, row, perm,
             /*values=*/false);
  return at::empty_symint({col.sym_size(0), src.sym_size(1)}, src.options());
}

at::Tensor softmax_meta(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src, const at::Tensor& dst,
                        c10::string_view score, const OptTensor& att, double negative_slope, double scale) {
  check_args(rowptr, col, src, dst, score, att, negative_slope, scale, 0, std::nullopt, std::nullopt, std::nullopt,
             /*values=*/false);
  return at::empty_symint({col.sym_size(0), src.sym_size(1)}, src.options());
}

at::Tensor score_grad_meta(const at::Tensor& /*grad*/, const at::Tensor& rowptr, const at::Tensor& col,
                           const at::Tensor& src, const at::Tensor& dst, c10::string_view score, const OptTensor& att,
                           double negative_slope, double scale) {
  check_args(rowptr, col, src, dst, score, att, negative_slope, scale, 0, std::nullopt, std::nullopt, std::nullopt,
             /*values=*/false);
  return at::empty_symint({col.sym_size(0), src.sym_size(1)},
                          src.options().dtype(at::toOpMathType(src.scalar_type())));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gatv2_backward_meta(
    const at::Tensor& /*grad*/, const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
    const at::Tensor& dst, const at::Tensor& att, double negative_slope, const OptTensor& colptr,
    const OptTensor& row, const OptTensor& perm, std::array<bool, 3> output_mask) {
  check_args(rowptr, col, src, dst, "gatv2", att, negative_slope, 1, 0, colptr, row, perm, /*values=*/false);
  // Contiguous, as the device kernels write them.
  const auto fresh = [](const at::Tensor& like) { return at::empty_symint(like.sym_sizes(), like.options()); };
  return {output_mask[0] ? fresh(src) : at::Tensor(), output_mask[1] ? fresh(dst) : at::Tensor(),
          output_mask[2] ? fresh(att) : at::Tensor()};
}

}  // namespace
}  // namespace attention_detail

at::Tensor edge_attention(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& src,
                          const at::Tensor& dst, std::string_view score, const std::optional<at::Tensor>& att,
                          double negative_slope, double scale, double dropout,
                          const std::optional<at::Generator>& generator,
                          const std::optional<SpmmTranspose>& transpose) {
  using T = std::optional<at::Tensor>;
  const T colptr = transpose ? T(transpose->colptr) : std::nullopt;
  const T row = transpose ? T(transpose->row) : std::nullopt;
  const T perm = transpose ? T(transpose->perm) : std::nullopt;
  return attention_detail::call_edge_attention(rowptr, col, src, dst, c10::string_view(score.data(), score.size()),
                                               att, negative_slope, scale, dropout, generator, colptr, row, perm);
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  using namespace torchplug::attention_detail;
  m.define(kEdgeAttention);
  m.define(kSoftmax);
  m.define(kScoreGrad);
  m.define(kGatv2Backward);
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  using namespace torchplug::attention_detail;
  m.impl(kEdgeAttention, &edge_attention_meta);
  m.impl(kSoftmax, &softmax_meta);
  m.impl(kScoreGrad, &score_grad_meta);
  m.impl(kGatv2Backward, &gatv2_backward_meta);
}
