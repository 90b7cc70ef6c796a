// spmm: definitions (schemas in spmm_schema.h), C++ API, input checks, the
// planning shared by the CPU and CUDA kernels, and the Meta kernels. One op per reduction,
// the transpose, and the per-edge products:
//   spmm_<r>(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? colptr=None, Tensor? row=None,
//            Tensor? perm=None) -> Tensor   (min, max: (out, arg))
//   spmm_transpose(Tensor rowptr, Tensor col, SymInt num_cols) -> (Tensor colptr, Tensor row, Tensor perm)
//   sddmm(Tensor rowptr, Tensor col, Tensor a, Tensor b, bool mean=False, Tensor? colptr=None,
//         Tensor? row=None, Tensor? perm=None, int heads=1) -> Tensor

#include "spmm.h"

#include "spmm_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>

#include <string>

namespace torchplug {
namespace spmm_detail {
namespace {

void check_csr(const char* op, const at::Tensor& rowptr, const at::Tensor& col) {
  core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col)});
  core::check_index_dtype(op, "rowptr", rowptr);
  core::check_index_dtype(op, "col", col);
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.sym_size(0) >= 1, op,
              ": argument 'rowptr' must be 1-D with at least one value, got shape ", rowptr.sym_sizes());
  TORCH_CHECK(col.dim() == 1, op, ": argument 'col' must be 1-D, got shape ", col.sym_sizes());
}

// A transpose given to an op: all three of spmm_transpose's outputs or none,
// int64 on the adjacency's device, colptr [N + 1] (`cols` says what N is),
// row and perm [nnz]. Shapes only: shared with the Meta kernels.
void check_transpose_shapes(const char* op, const at::Tensor& col, const c10::SymInt& N, const char* cols,
                            const OptTensor& colptr, const OptTensor& row, const OptTensor& perm) {
  const int given = colptr.has_value() + row.has_value() + perm.has_value();
  if (given == 0) return;
  TORCH_CHECK(given == 3, op, ": arguments 'colptr', 'row' and 'perm' (the transpose spmm_transpose builds) ",
              "must be given together, got ", given, " of them");
  const at::Tensor& colptr_ = *colptr;
  const at::Tensor& row_ = *row;
  const at::Tensor& perm_ = *perm;
  core::check_same_device(op, {TORCHPLUG_ARG(col), {"colptr", &colptr_}, {"row", &row_}, {"perm", &perm_}});
  core::check_index_dtype(op, "colptr", colptr_);
  core::check_index_dtype(op, "row", row_);
  core::check_index_dtype(op, "perm", perm_);
  TORCH_CHECK(colptr_.dim() == 1 && colptr_.sym_size(0) == N + 1, op, ": argument 'colptr' of shape ",
              colptr_.sym_sizes(), " must be [N + 1] with N = ", cols, " = ", N);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"row", &row_}, {"perm", &perm_}}) {
    TORCH_CHECK(t->dim() == 1 && t->sym_size(0) == col.sym_size(0), op, ": argument '", name, "' of shape ",
                t->sym_sizes(), " must be [nnz] with nnz = col.size(0) = ", col.sym_size(0));
  }
}

// On the CPU and in checked mode: colptr is offsets ending at nnz, row in
// [0, M), perm in [0, nnz).
void check_transpose_values(const char* op, int64_t M, int64_t nnz, const OptTensor& colptr, const OptTensor& row,
                            const OptTensor& perm) {
  if (!colptr.has_value() || !core::validates_indices(colptr->device())) return;
  core::check_offsets(op, "colptr", *colptr, nnz, "nnz = col.size(0)");
  core::check_index_range(op, "row", core::index_bounds(*row), M);
  core::check_index_range(op, "perm", core::index_bounds(*perm), nnz);
}

// Shape and dtype checks shared with the Meta kernels.
void check_args(const char* op, const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                const at::Tensor& x, const OptTensor& colptr, const OptTensor& row, const OptTensor& perm) {
  core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(x)});
  check_csr(op, rowptr, col);
  core::check_dtype_in(op, "x", x, kDtypes);
  TORCH_CHECK(x.dim() >= 1, op, ": argument 'x' must have at least one dimension");
  if (value.has_value()) {
    const at::Tensor& v = *value;
    core::check_same_device(op, {{"value", &v}, TORCHPLUG_ARG(x)});
    TORCH_CHECK(v.scalar_type() == x.scalar_type(), op, ": argument 'value' must have x's dtype ",
                x.scalar_type(), ", got ", v.scalar_type());
    TORCH_CHECK((v.dim() == 1 || v.dim() == 2) && v.sym_size(0) == col.sym_size(0), op,
                ": argument 'value' of shape ", v.sym_sizes(), " must be [nnz] or [nnz, H] with nnz = col.size(0) = ",
                col.sym_size(0));
    TORCH_CHECK(v.dim() == 1 || (x.dim() >= 2 && x.sym_size(1) == v.sym_size(1)), op, ": argument 'value' of shape ",
                v.sym_sizes(), " weighs H = ", v.sym_size(1), " heads: x of shape ", x.sym_sizes(),
                " must be [N, H, *]");
  }
  check_transpose_shapes(op, col, x.sym_size(0), "x.size(0)", colptr, row, perm);
}

// rowptr starts at 0, never decreases and ends at nnz; col within [0, N):
// on the CPU always, on CUDA in checked mode.
void check_values(const char* op, const at::Tensor& rowptr, const at::Tensor& col, int64_t N) {
  if (!core::validates_indices(rowptr.device())) return;
  core::check_offsets(op, "rowptr", rowptr, col.size(0), "nnz = col.size(0)");
  core::check_index_range(op, "col", core::index_bounds(col), N);
}

void check_sddmm_args(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                      const OptTensor& colptr, const OptTensor& row, const OptTensor& perm, int64_t heads) {
  const char* op = kSddmm.name().c_str();
  core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(a), TORCHPLUG_ARG(b)});
  check_csr(op, rowptr, col);
  core::check_dtype_in(op, "a", a, kDtypes);
  core::check_same_dtype(op, TORCHPLUG_ARG(a), TORCHPLUG_ARG(b));
  TORCH_CHECK(a.dim() >= 1 && a.sym_size(0) == rowptr.sym_size(0) - 1, op, ": argument 'a' of shape ",
              a.sym_sizes(), " must be [M, *] with M = rowptr.size(0) - 1 = ", rowptr.sym_size(0) - 1);
  TORCH_CHECK(b.dim() == a.dim() && b.sym_sizes().slice(1) == a.sym_sizes().slice(1), op,
              ": argument 'b' of shape ", b.sym_sizes(), " must be [N, *] with a's trailing shape ",
              a.sym_sizes().slice(1));
  TORCH_CHECK(heads >= 1, op, ": argument 'heads' must be at least 1, got ", heads);
  TORCH_CHECK(heads == 1 || (a.dim() >= 2 && a.sym_size(1) == heads), op, ": argument 'a' of shape ", a.sym_sizes(),
              " must be [M, H, *] with H = heads = ", heads);
  check_transpose_shapes(op, col, b.sym_size(0), "b.size(0)", colptr, row, perm);
}

}  // namespace

template <typename Policy>
SpmmProblem plan(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value, const at::Tensor& x,
                 const OptTensor& colptr, const OptTensor& row, const OptTensor& perm) {
  const char* op = kSpmm.of<Policy>().name().c_str();
  check_args(op, rowptr, col, value, x, colptr, row, perm);
  SpmmProblem p;
  p.M = rowptr.size(0) - 1;
  p.N = x.size(0);
  p.nnz = col.size(0);
  p.F = c10::multiply_integers(x.sizes().slice(1));
  p.H = value.has_value() && value->dim() == 2 ? value->size(1) : 1;
  p.C = p.H > 0 ? p.F / p.H : 0;
  check_values(op, rowptr, col, p.N);
  check_transpose_values(op, p.M, p.nnz, colptr, row, perm);
  p.rowptr = rowptr.contiguous();
  p.col = col.contiguous();
  if (value.has_value()) p.value = value->contiguous();
  p.x = x.contiguous();
  auto sizes = x.sizes().vec();
  sizes[0] = p.M;
  p.out = at::empty(sizes, x.options());
  p.arg = core::empty_arg<Policy>(p.out);
  return p;
}

template <typename Policy>
Result<Policy> meta(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value, const at::Tensor& x,
                    const OptTensor& colptr, const OptTensor& row, const OptTensor& perm) {
  check_args(kSpmm.of<Policy>().name().c_str(), rowptr, col, value, x, colptr, row, perm);
  auto sizes = x.sym_sizes().vec();
  sizes[0] = rowptr.sym_size(0) - 1;
  return core::meta_results<Policy>(sizes, x.options());
}

template SpmmProblem plan<core::SumPolicy>(const at::Tensor&, const at::Tensor&, const OptTensor&,
                                          const at::Tensor&, const OptTensor&, const OptTensor&, const OptTensor&);
template SpmmProblem plan<core::MeanPolicy>(const at::Tensor&, const at::Tensor&, const OptTensor&,
                                           const at::Tensor&, const OptTensor&, const OptTensor&, const OptTensor&);
template SpmmProblem plan<core::MinPolicy>(const at::Tensor&, const at::Tensor&, const OptTensor&,
                                          const at::Tensor&, const OptTensor&, const OptTensor&, const OptTensor&);
template SpmmProblem plan<core::MaxPolicy>(const at::Tensor&, const at::Tensor&, const OptTensor&,
                                          const at::Tensor&, const OptTensor&, const OptTensor&, const OptTensor&);

TransposeProblem plan_transpose(const at::Tensor& rowptr, const at::Tensor& col, int64_t num_cols) {
  const char* op = kSpmmTranspose.name().c_str();
  check_csr(op, rowptr, col);
  TORCH_CHECK(num_cols >= 0, op, ": argument 'num_cols' must be at least 0, got ", num_cols);
  TransposeProblem p;
  p.M = rowptr.size(0) - 1;
  p.N = num_cols;
  p.nnz = col.size(0);
  check_values(op, rowptr, col, num_cols);
  p.rowptr = rowptr.contiguous();
  p.col = col.contiguous();
  p.colptr = at::empty({p.N + 1}, col.options());
  p.row = at::empty({p.nnz}, col.options());
  p.perm = at::empty({p.nnz}, col.options());
  return p;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> meta_transpose(const at::Tensor& rowptr, const at::Tensor& col,
                                                              c10::SymInt num_cols) {
  check_csr(kSpmmTranspose.name().c_str(), rowptr, col);
  const auto nnz = col.sym_size(0);
  return {at::empty_symint({num_cols + 1}, col.options()), at::empty_symint({nnz}, col.options()),
          at::empty_symint({nnz}, col.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_transpose(const at::Tensor& rowptr, const at::Tensor& col,
                                                              c10::SymInt num_cols) {
  static const auto op =
      core::find_op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                   c10::SymInt)>(kSpmmTranspose);
  return op.call(rowptr, col, num_cols);
}

SddmmProblem plan_sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                        bool mean, const OptTensor& colptr, const OptTensor& row, const OptTensor& perm,
                        int64_t heads) {
  check_sddmm_args(rowptr, col, a, b, colptr, row, perm, heads);
  SddmmProblem p;
  p.M = rowptr.size(0) - 1;
  p.N = b.size(0);
  p.nnz = col.size(0);
  p.F = c10::multiply_integers(a.sizes().slice(1));
  p.H = heads;
  p.C = p.F / heads;
  p.mean = mean;
  check_values(kSddmm.name().c_str(), rowptr, col, p.N);
  check_transpose_values(kSddmm.name().c_str(), p.M, p.nnz, colptr, row, perm);
  p.rowptr = rowptr.contiguous();
  p.col = col.contiguous();
  p.a = a.contiguous();
  p.b = b.contiguous();
  p.out = heads == 1 ? at::empty({p.nnz}, a.options()) : at::empty({p.nnz, heads}, a.options());
  return p;
}

at::Tensor meta_sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                      bool /*mean*/, const OptTensor& colptr, const OptTensor& row, const OptTensor& perm,
                      int64_t heads) {
  check_sddmm_args(rowptr, col, a, b, colptr, row, perm, heads);
  if (heads == 1) return at::empty_symint({col.sym_size(0)}, a.options());
  return at::empty_symint({col.sym_size(0), heads}, a.options());
}

at::Tensor call_sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                      bool mean, const OptTensor& colptr, const OptTensor& row, const OptTensor& perm,
                      int64_t heads) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, bool,
                               const OptTensor&, const OptTensor&, const OptTensor&, int64_t)>(kSddmm);
  return op.call(rowptr, col, a, b, mean, colptr, row, perm, heads);
}

}  // namespace spmm_detail

namespace {

struct TransposeArgs {
  std::optional<at::Tensor> colptr, row, perm;
  explicit TransposeArgs(const std::optional<SpmmTranspose>& t) {
    if (t.has_value()) {
      colptr = t->colptr;
      row = t->row;
      perm = t->perm;
    }
  }
};

}  // namespace

at::Tensor spmm_sum(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                    const at::Tensor& x, const std::optional<SpmmTranspose>& transpose) {
  const TransposeArgs t(transpose);
  return spmm_detail::call_spmm<core::SumPolicy>(rowptr, col, value, x, t.colptr, t.row, t.perm);
}
at::Tensor spmm_mean(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                     const at::Tensor& x, const std::optional<SpmmTranspose>& transpose) {
  const TransposeArgs t(transpose);
  return spmm_detail::call_spmm<core::MeanPolicy>(rowptr, col, value, x, t.colptr, t.row, t.perm);
}
std::tuple<at::Tensor, at::Tensor> spmm_min(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                                            const at::Tensor& x, const std::optional<SpmmTranspose>& transpose) {
  const TransposeArgs t(transpose);
  return spmm_detail::call_spmm<core::MinPolicy>(rowptr, col, value, x, t.colptr, t.row, t.perm);
}
std::tuple<at::Tensor, at::Tensor> spmm_max(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                                            const at::Tensor& x, const std::optional<SpmmTranspose>& transpose) {
  const TransposeArgs t(transpose);
  return spmm_detail::call_spmm<core::MaxPolicy>(rowptr, col, value, x, t.colptr, t.row, t.perm);
}

at::Tensor spmm(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                const at::Tensor& x, std::string_view reduce, const std::optional<SpmmTranspose>& transpose) {
  const TransposeArgs t(transpose);
  return spmm_detail::SpmmOps::visit("torchplug::spmm", reduce, [&](auto policy) -> at::Tensor {
    auto result = spmm_detail::call_spmm<decltype(policy)>(rowptr, col, value, x, t.colptr, t.row, t.perm);
    if constexpr (decltype(policy)::kHasArg) {
      return std::get<0>(result);
    } else {
      return result;
    }
  });
}

SpmmTranspose spmm_transpose(const at::Tensor& rowptr, const at::Tensor& col, int64_t num_cols) {
  auto [colptr, row, perm] = spmm_detail::call_transpose(rowptr, col, num_cols);
  return {colptr, row, perm};
}

at::Tensor sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                 bool mean, const std::optional<SpmmTranspose>& transpose, int64_t heads) {
  const TransposeArgs t(transpose);
  return spmm_detail::call_sddmm(rowptr, col, a, b, mean, t.colptr, t.row, t.perm, heads);
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  using namespace torchplug::spmm_detail;
  kSpmm.define_all(m);
  m.define(kSpmmTranspose);
  m.define(kSddmm);
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  using namespace torchplug::spmm_detail;
  SpmmOps::for_each([&](auto policy) { m.impl(kSpmm.of<decltype(policy)>(), &meta<decltype(policy)>); });
  m.impl(kSpmmTranspose, &meta_transpose);
  m.impl(kSddmm, &meta_sddmm);
}
