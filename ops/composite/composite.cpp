// The composites: schemas, registry entries, C++ API, input checks, the
// planning shared by the CPU and CUDA kernels, and the Meta kernels.
//   scatter_softmax(src, index, dim, dim_size)       -> src's shape
//   scatter_log_softmax(src, index, dim, dim_size)   -> src's shape
//   scatter_logsumexp(src, index, dim, dim_size)     -> [*, N, *]
//   scatter_logsumexp_(out, src, index, dim)         -> ()   out's values take part
//   scatter_std(src, index, dim, dim_size, unbiased) -> [*, N, *]
//   softmax_csr(src, indptr, dim)                    -> src's shape
//   scatter_softmax_backward(grad, out, index, dim, dim_size, log) -> grad's shape
// softmax and log_softmax take `int? dim_size`, not SymInt: their output has
// src's shape whatever the index holds.

#include "composite.h"

#include "composite_kernel.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/searchsorted.h>

#include <string>

namespace torchplug {
namespace composite_detail {

using core::SumPolicy;

namespace {

// The Meta kernel of the emitting ops, which no scatter Meta kernel checks
// for: every shape and dtype check; returns dim in [0, src.dim()). The
// other entries check the floating dtype alone (check_floating) and leave
// the rest to scatter's planning or Meta kernel.
int64_t check_inputs(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim) {
  core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  core::check_dtype_in(op, "src", src, kDtypes);
  TORCHPLUG_CHECK_INDEX(op, index);
  TORCH_CHECK(src.dim() > 0, op, ": argument 'src' must have at least one dimension");
  dim = core::normalize_dim(op, dim, src.dim());
  core::broadcast(op, index, src, dim);
  return dim;
}

void check_floating(const char* op, const at::Tensor& src) { core::check_dtype_in(op, "src", src, kDtypes); }

int64_t check_indptr_args(const char* op, const at::Tensor& src, const at::Tensor& indptr, int64_t dim) {
  core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
  core::check_dtype_in(op, "src", src, kDtypes);
  core::check_index_dtype(op, "indptr", indptr);
  TORCH_CHECK(indptr.dim() == 1 && indptr.size(0) >= 1, op,
              ": argument 'indptr' must be 1-D with at least one value, got shape ", indptr.sizes());
  TORCH_CHECK(src.dim() > 0, op, ": argument 'src' must have at least one dimension");
  return core::normalize_dim(op, dim, src.dim());
}

c10::OperatorHandle find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

}  // namespace

at::Tensor csr_rows(const at::Tensor& indptr, int64_t E) {
  // The number of bounds at or before a position, less one: its group, N past
  // the last and -1 before indptr[0] (a malformed indptr outside checked
  // mode): both in no group.
  const auto positions = at::arange(E, indptr.options());
  return at::searchsorted(indptr, positions, /*out_int32=*/false, /*right=*/true).sub_(1);
}

RowsProblem plan_emit(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                      std::optional<int64_t> dim_size) {
  check_floating(op, src);
  RowsProblem r{scatter_detail::describe(op, src, index, dim, dim_size), at::Tensor()};
  r.p.out = at::empty_like(r.p.src);
  return r;
}

RowsProblem plan_softmax_csr(const char* op, const at::Tensor& src, const at::Tensor& indptr, int64_t dim) {
  dim = check_indptr_args(op, src, indptr, dim);
  if (core::validates_indices(indptr.device())) {
    core::check_offsets(op, "indptr", indptr, src.size(dim), "src.size(dim)");
  }
  return plan_emit(op, src, csr_rows(indptr, src.size(dim)), dim, indptr.size(0) - 1);
}

RowsProblem plan_backward(const char* op, const at::Tensor& grad, const at::Tensor& out,
                          const at::Tensor& index, int64_t dim, std::optional<int64_t> dim_size) {
  core::check_same_device(op, {TORCHPLUG_ARG(grad), TORCHPLUG_ARG(out)});
  core::check_same_dtype(op, TORCHPLUG_ARG(grad), TORCHPLUG_ARG(out));
  TORCH_CHECK(grad.sizes() == out.sizes(), op, ": argument 'grad' of shape ", grad.sizes(),
              " does not match out of shape ", out.sizes());
  RowsProblem r = plan_emit(op, grad, index, dim, dim_size);
  r.y = out.contiguous();
  return r;
}

RowsProblem plan_reduce(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size) {
  check_floating(op, src);
  return {scatter_detail::plan<SumPolicy>(src, index, dim, dim_size, op), at::Tensor()};
}

RowsProblem plan_reduce_into(const char* op, const at::Tensor& out, const at::Tensor& src,
                             const at::Tensor& index, int64_t dim) {
  check_floating(op, src);
  return {scatter_detail::plan_inplace<SumPolicy>(out, src, index, dim, op), at::Tensor()};
}

// ---- Meta kernels ----------------------------------------------------------------

namespace {

at::Tensor meta_emit(const at::Tensor& src, const at::Tensor& index, int64_t dim, std::optional<int64_t>,
                     const char* op) {
  check_inputs(op, src, index, dim);
  return at::empty_like(src, at::MemoryFormat::Contiguous);
}

at::Tensor meta_reduce(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                       std::optional<c10::SymInt> dim_size) {
  check_floating(op, src);
  return scatter_detail::meta<SumPolicy>(op, src, index, dim, std::move(dim_size));
}

}  // namespace

// ---- the ops through the dispatcher ----------------------------------------------

at::Tensor call_softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size, bool log) {
  static auto softmax = find_op("torchplug::scatter_softmax")
                            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                              std::optional<int64_t>)>();
  static auto log_softmax = find_op("torchplug::scatter_log_softmax")
                                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                                  std::optional<int64_t>)>();
  return (log ? log_softmax : softmax).call(src, index, dim, dim_size);
}

at::Tensor call_softmax_backward(const at::Tensor& grad, const at::Tensor& out, const at::Tensor& index,
                                 int64_t dim, std::optional<int64_t> dim_size, bool log) {
  static auto op = find_op("torchplug::scatter_softmax_backward")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                         std::optional<int64_t>, bool)>();
  return op.call(grad, out, index, dim, dim_size, log);
}

at::Tensor call_logsumexp(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                          std::optional<c10::SymInt> dim_size) {
  static auto op = find_op("torchplug::scatter_logsumexp")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                         std::optional<c10::SymInt>)>();
  return op.call(src, index, dim, std::move(dim_size));
}

void call_logsumexp_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index, int64_t dim) {
  static auto op = find_op("torchplug::scatter_logsumexp_")
                       .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  op.call(out, src, index, dim);
}

at::Tensor call_std(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<c10::SymInt> dim_size, bool unbiased) {
  static auto op = find_op("torchplug::scatter_std")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                         std::optional<c10::SymInt>, bool)>();
  return op.call(src, index, dim, std::move(dim_size), unbiased);
}

}  // namespace composite_detail

using composite_detail::find_op;

at::Tensor scatter_softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                           std::optional<int64_t> dim_size) {
  return composite_detail::call_softmax(src, index, dim, dim_size, false);
}

at::Tensor scatter_log_softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                               std::optional<int64_t> dim_size) {
  return composite_detail::call_softmax(src, index, dim, dim_size, true);
}

at::Tensor scatter_logsumexp(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                             const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size) {
  constexpr const char* name = "torchplug::scatter_logsumexp";
  if (!out.has_value()) {
    std::optional<c10::SymInt> size;
    if (dim_size) size = c10::SymInt(*dim_size);
    return composite_detail::call_logsumexp(src, index, dim, std::move(size));
  }
  const int64_t d = core::normalize_dim(name, dim, src.dim());
  if (dim_size && out->dim() > d) {
    TORCH_CHECK(*dim_size == out->size(d), name, ": argument 'dim_size' (", *dim_size,
                ") disagrees with out.size(", d, ") (", out->size(d), ")");
  }
  composite_detail::call_logsumexp_(*out, src, index, dim);
  return *out;
}

at::Tensor scatter_std(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                       const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size, bool unbiased) {
  constexpr const char* name = "torchplug::scatter_std";
  if (out.has_value()) {
    const int64_t d = core::normalize_dim(name, dim, src.dim());
    TORCH_CHECK(out->dim() == src.dim(), name, ": argument 'out' has ", out->dim(),
                " dimensions, src ", src.dim());
    TORCH_CHECK(!dim_size || *dim_size == out->size(d), name, ": argument 'dim_size' (", dim_size.value_or(0),
                ") disagrees with out.size(", d, ") (", out->size(d), ")");
    dim_size = out->size(d);
  }
  std::optional<c10::SymInt> size;
  if (dim_size) size = c10::SymInt(*dim_size);
  auto result = composite_detail::call_std(src, index, dim, std::move(size), unbiased);
  if (!out.has_value()) return result;
  core::check_same_dtype(name, {"out", &*out}, {"src", &src});
  TORCH_CHECK(out->sizes() == result.sizes(), name, ": argument 'out' of shape ", out->sizes(),
              " does not match the expected ", result.sizes());
  return out->copy_(result);
}

at::Tensor softmax_csr(const at::Tensor& src, const at::Tensor& indptr, int64_t dim) {
  static auto op = find_op("torchplug::softmax_csr")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(src, indptr, dim);
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  const std::vector<c10::ScalarType> dtypes(torchplug::composite_detail::kDtypes);
  m.define({"scatter_softmax(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor",
            dtypes, "Softmax of src within each group that index names along dim (one fused op)."});
  m.define({"scatter_log_softmax(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor",
            dtypes, "Log-softmax of src within each group that index names along dim."});
  m.define({"scatter_logsumexp(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor",
            dtypes, "log(sum(exp(src))) of each group that index names along dim, computed stably."});
  m.define({"scatter_logsumexp_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> ()", dtypes,
            "In-place scatter_logsumexp: reduces into out, whose values take part."});
  m.define({"scatter_std(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None, bool unbiased=True) "
            "-> Tensor",
            dtypes, "Standard deviation of each group that index names along dim (Welford)."});
  m.define({"softmax_csr(Tensor src, Tensor indptr, int dim=0) -> Tensor", dtypes,
            "Softmax of src within each sorted group indptr[i] .. indptr[i + 1] along dim."});
  m.define({"scatter_softmax_backward(Tensor grad, Tensor out, Tensor index, int dim, int? dim_size, "
            "bool log) -> Tensor",
            dtypes, "The src gradient of scatter_softmax (log: scatter_log_softmax), fused."});
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  using namespace torchplug::composite_detail;
  m.impl("scatter_softmax", [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                               std::optional<int64_t> dim_size) {
    return meta_emit(src, index, dim, dim_size, "torchplug::scatter_softmax");
  });
  m.impl("scatter_log_softmax", [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                   std::optional<int64_t> dim_size) {
    return meta_emit(src, index, dim, dim_size, "torchplug::scatter_log_softmax");
  });
  m.impl("scatter_logsumexp", [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                 std::optional<c10::SymInt> dim_size) {
    return meta_reduce("torchplug::scatter_logsumexp", src, index, dim, std::move(dim_size));
  });
  m.impl("scatter_logsumexp_", [](const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                                  int64_t dim) {
    constexpr const char* op = "torchplug::scatter_logsumexp_";
    check_floating(op, src);
    torchplug::scatter_detail::meta_inplace<SumPolicy>(op, out, src, index, dim);
  });
  m.impl("scatter_std", [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                           std::optional<c10::SymInt> dim_size, bool) {
    return meta_reduce("torchplug::scatter_std", src, index, dim, std::move(dim_size));
  });
  m.impl("softmax_csr", [](const at::Tensor& src, const at::Tensor& indptr, int64_t dim) {
    check_indptr_args("torchplug::softmax_csr", src, indptr, dim);
    return at::empty_like(src, at::MemoryFormat::Contiguous);
  });
  m.impl("scatter_softmax_backward", [](const at::Tensor& grad, const at::Tensor& out, const at::Tensor& index,
                                        int64_t dim, std::optional<int64_t> dim_size, bool) {
    constexpr const char* op = "torchplug::scatter_softmax_backward";
    torchplug::core::check_same_dtype(op, TORCHPLUG_ARG(grad), TORCHPLUG_ARG(out));
    TORCH_CHECK(grad.sym_sizes() == out.sym_sizes(), op, ": argument 'grad' of shape ", grad.sym_sizes(),
                " does not match out of shape ", out.sym_sizes());
    return meta_emit(grad, index, dim, dim_size, op);
  });
}
