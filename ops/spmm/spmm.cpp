// spmm: schemas, registry entries, C++ API, input checks, the planning shared
// by the CPU and CUDA kernels, and the Meta kernels. One op per reduction:
//   spmm_<r>(Tensor rowptr, Tensor col, Tensor? value, Tensor x) -> Tensor   (min, max: (out, arg))

#include "spmm.h"

#include "spmm_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include "torchplug/core/library.h"

#include <torch/library.h>

#include <string>

namespace torchplug {
namespace spmm_detail {
namespace {

const std::initializer_list<at::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};

// Shape and dtype checks shared with the Meta kernels.
void check_args(const char* op, const at::Tensor& rowptr, const at::Tensor& col,
                const std::optional<at::Tensor>& value, const at::Tensor& x) {
  core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(x)});
  core::check_index_dtype(op, "rowptr", rowptr);
  core::check_index_dtype(op, "col", col);
  core::check_dtype_in(op, "x", x, kDtypes);
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.sym_size(0) >= 1, op,
              ": argument 'rowptr' must be 1-D with at least one value, got shape ", rowptr.sym_sizes());
  TORCH_CHECK(col.dim() == 1, op, ": argument 'col' must be 1-D, got shape ", col.sym_sizes());
  TORCH_CHECK(x.dim() >= 1, op, ": argument 'x' must have at least one dimension");
  if (value.has_value()) {
    const at::Tensor& v = *value;
    core::check_same_device(op, {{"value", &v}, TORCHPLUG_ARG(x)});
    TORCH_CHECK(v.scalar_type() == x.scalar_type(), op, ": argument 'value' must have x's dtype ",
                x.scalar_type(), ", got ", v.scalar_type());
    TORCH_CHECK(v.dim() == 1 && v.sym_size(0) == col.sym_size(0), op, ": argument 'value' of shape ",
                v.sym_sizes(), " must be [nnz] with nnz = col.size(0) = ", col.sym_size(0));
  }
}

// rowptr starts at 0, never decreases and ends at nnz; col within [0, N):
// on the CPU always, on CUDA in checked mode.
void check_values(const char* op, const at::Tensor& rowptr, const at::Tensor& col, int64_t N) {
  if (!core::validates_indices(rowptr.device())) return;
  core::check_offsets(op, "rowptr", rowptr, col.size(0), "nnz = col.size(0)");
  core::check_index_range(op, "col", core::index_bounds(col), N);
}

template <typename Policy>
c10::OperatorHandle find_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow(kOpName<Policy>, "");
}

}  // namespace

template <typename Policy>
SpmmProblem plan(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                 const at::Tensor& x) {
  constexpr const char* op = kOpName<Policy>;
  check_args(op, rowptr, col, value, x);
  SpmmProblem p;
  p.M = rowptr.size(0) - 1;
  p.N = x.size(0);
  p.nnz = col.size(0);
  p.F = c10::multiply_integers(x.sizes().slice(1));
  check_values(op, rowptr, col, p.N);
  p.rowptr = rowptr.contiguous();
  p.col = col.contiguous();
  if (value.has_value()) p.value = value->contiguous();
  p.x = x.contiguous();
  auto sizes = x.sizes().vec();
  sizes[0] = p.M;
  p.out = at::empty(sizes, x.options());
  p.arg = scatter_detail::empty_arg<Policy>(p.out);
  return p;
}

template <typename Policy>
Result<Policy> meta(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                    const at::Tensor& x) {
  check_args(kOpName<Policy>, rowptr, col, value, x);
  auto sizes = x.sym_sizes().vec();
  sizes[0] = rowptr.sym_size(0) - 1;
  return scatter_detail::meta_results<Policy>(sizes, x.options());
}

template <typename Policy>
Result<Policy> call_spmm(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                         const at::Tensor& x) {
  static auto op = find_op<Policy>().template typed<Result<Policy>(
      const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&)>();
  return op.call(rowptr, col, value, x);
}

#define TORCHPLUG_INSTANTIATE(name, Policy)                                                                  \
  template SpmmProblem plan<Policy>(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, \
                                    const at::Tensor&);                                                      \
  template Result<Policy> call_spmm<Policy>(const at::Tensor&, const at::Tensor&,                            \
                                            const std::optional<at::Tensor>&, const at::Tensor&);
TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_INSTANTIATE)
#undef TORCHPLUG_INSTANTIATE

}  // namespace spmm_detail

#define TORCHPLUG_SPMM_API(name, Policy)                                                                     \
  spmm_detail::Result<Policy> spmm_##name(const at::Tensor& rowptr, const at::Tensor& col,                  \
                                          const std::optional<at::Tensor>& value, const at::Tensor& x) {     \
    return spmm_detail::call_spmm<Policy>(rowptr, col, value, x);                                           \
  }
TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_SPMM_API)
#undef TORCHPLUG_SPMM_API

at::Tensor spmm(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                const at::Tensor& x, std::string_view reduce) {
  if (reduce == "sum" || reduce == "add") return spmm_sum(rowptr, col, value, x);
  if (reduce == "mean") return spmm_mean(rowptr, col, value, x);
  if (reduce == "min") return std::get<0>(spmm_min(rowptr, col, value, x));
  if (reduce == "max") return std::get<0>(spmm_max(rowptr, col, value, x));
  TORCH_CHECK_VALUE(false, "torchplug::spmm: argument 'reduce' must be one of 'sum', 'add', 'mean', 'min', "
                    "'max', got '", reduce, "'");
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  const std::vector<c10::ScalarType> dtypes = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};
#define TORCHPLUG_DEFINE(name, Policy)                                                                          \
  m.define({"spmm_" #name "(Tensor rowptr, Tensor col, Tensor? value, Tensor x) -> " +                           \
                std::string(Policy::kHasArg ? "(Tensor, Tensor)" : "Tensor"),                                   \
            dtypes, "Sparse (CSR) times dense with the " #name " of each row's weighted messages."});
  TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_DEFINE)
#undef TORCHPLUG_DEFINE
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
#define TORCHPLUG_META(name, Policy) m.impl("spmm_" #name, &torchplug::spmm_detail::meta<Policy>);
  TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_META)
#undef TORCHPLUG_META
}
