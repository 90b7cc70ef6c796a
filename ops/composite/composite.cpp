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

int64_t check_indptr_args(const char* op, const at::Tensor& src, const at::Tensor& indptr, int64_t dim) {
  core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
  core::check_dtype_in(op, "src", src, kDtypes);
  core::check_index_dtype(op, "indptr", indptr);
  TORCH_CHECK(indptr.dim() == 1 && indptr.size(0) >= 1, op,
              ": argument 'indptr' must be 1-D with at least one value, got shape ", indptr.sizes());
  TORCH_CHECK(src.dim() > 0, op, ": argument 'src' must have at least one dimension");
  return core::normalize_dim(op, dim, src.dim());
}

}  // namespace

at::Tensor csr_rows(const at::Tensor& indptr, int64_t E) {
  // The number of bounds at or before a position, less one: its group, N past
  // the last and -1 before indptr[0] (a malformed indptr outside checked
  // mode): both in no group.
  const auto positions = at::arange(E, indptr.options());
  return at::searchsorted(indptr, positions, /*out_int32=*/false, /*right=*/true).sub_(1);
}

RowsProblem plan_emit(const core::OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                      std::optional<int64_t> dim_size) {
  RowsProblem r{core::describe(op, src, index, dim, dim_size), at::Tensor()};
  r.p.out = at::empty_like(r.p.src);
  return r;
}

RowsProblem plan_softmax_csr(const core::OpDef& op, const at::Tensor& src, const at::Tensor& indptr,
                             int64_t dim) {
  dim = check_indptr_args(op.name().c_str(), src, indptr, dim);
  if (core::validates_indices(indptr.device())) {
    core::check_offsets(op.name().c_str(), "indptr", indptr, src.size(dim), "src.size(dim)");
  }
  return plan_emit(op, src, csr_rows(indptr, src.size(dim)), dim, indptr.size(0) - 1);
}

RowsProblem plan_backward(const core::OpDef& def, const at::Tensor& grad, const at::Tensor& out,
                          const at::Tensor& index, int64_t dim, std::optional<int64_t> dim_size) {
  const char* op = def.name().c_str();
  core::check_same_device(op, {TORCHPLUG_ARG(grad), TORCHPLUG_ARG(out)});
  core::check_same_dtype(op, TORCHPLUG_ARG(grad), TORCHPLUG_ARG(out));
  TORCH_CHECK(grad.sizes() == out.sizes(), op, ": argument 'grad' of shape ", grad.sizes(),
              " does not match out of shape ", out.sizes());
  RowsProblem r = plan_emit(def, grad, index, dim, dim_size);
  r.y = out.contiguous();
  return r;
}

RowsProblem plan_reduce(const core::OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size) {
  return {core::plan<SumPolicy>(op, src, index, dim, dim_size), at::Tensor()};
}

RowsProblem plan_reduce_into(const core::OpDef& op, const at::Tensor& out, const at::Tensor& src,
                             const at::Tensor& index, int64_t dim) {
  return {core::plan_inplace<SumPolicy>(op, out, src, index, dim), at::Tensor()};
}

// ---- Meta kernels ----------------------------------------------------------------

namespace {

at::Tensor meta_emit(const at::Tensor& src, const at::Tensor& index, int64_t dim, std::optional<int64_t>,
                     const char* op) {
  check_inputs(op, src, index, dim);
  return at::empty_like(src, at::MemoryFormat::Contiguous);
}

at::Tensor meta_reduce(const core::OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                       const std::optional<c10::SymInt>& dim_size) {
  return core::meta<SumPolicy>(op, src, index, dim, dim_size);
}

}  // namespace

// ---- the ops through the dispatcher ----------------------------------------------

at::Tensor call_softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size, bool log) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, std::optional<int64_t>);
  static const auto softmax = core::find_op<Signature>(kScatterSoftmax);
  static const auto log_softmax = core::find_op<Signature>(kScatterLogSoftmax);
  return (log ? log_softmax : softmax).call(src, index, dim, dim_size);
}

at::Tensor call_softmax_backward(const at::Tensor& grad, const at::Tensor& out, const at::Tensor& index,
                                 int64_t dim, std::optional<int64_t> dim_size, bool log) {
  static const auto op = core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                                   std::optional<int64_t>, bool)>(kScatterSoftmaxBackward);
  return op.call(grad, out, index, dim, dim_size, log);
}

at::Tensor call_logsumexp(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                          std::optional<c10::SymInt> dim_size) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, std::optional<c10::SymInt>)>(
          kScatterLogsumexp);
  return op.call(src, index, dim, std::move(dim_size));
}

void call_logsumexp_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index, int64_t dim) {
  static const auto op =
      core::find_op<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>(kScatterLogsumexpInplace);
  op.call(out, src, index, dim);
}

at::Tensor call_std(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<c10::SymInt> dim_size, bool unbiased) {
  static const auto op = core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                                   std::optional<c10::SymInt>, bool)>(kScatterStd);
  return op.call(src, index, dim, std::move(dim_size), unbiased);
}

}  // namespace composite_detail

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
  const char* name = composite_detail::kScatterLogsumexp.name().c_str();
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
  const char* name = composite_detail::kScatterStd.name().c_str();
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
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>(composite_detail::kSoftmaxCsr);
  return op.call(src, indptr, dim);
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  using namespace torchplug::composite_detail;
  for (const auto* def : {&kScatterSoftmax, &kScatterLogSoftmax, &kScatterLogsumexp, &kScatterLogsumexpInplace,
                          &kScatterStd, &kSoftmaxCsr, &kScatterSoftmaxBackward}) {
    m.define(*def);
  }
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  using namespace torchplug::composite_detail;
  m.impl(kScatterSoftmax, [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                             std::optional<int64_t> dim_size) {
    return meta_emit(src, index, dim, dim_size, kScatterSoftmax.name().c_str());
  });
  m.impl(kScatterLogSoftmax, [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                std::optional<int64_t> dim_size) {
    return meta_emit(src, index, dim, dim_size, kScatterLogSoftmax.name().c_str());
  });
  m.impl(kScatterLogsumexp, [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                               std::optional<c10::SymInt> dim_size) {
    return meta_reduce(kScatterLogsumexp, src, index, dim, dim_size);
  });
  m.impl(kScatterLogsumexpInplace, [](const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                                      int64_t dim) {
    torchplug::core::meta_inplace<SumPolicy>(kScatterLogsumexpInplace, out, src, index, dim);
  });
  m.impl(kScatterStd, [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                         std::optional<c10::SymInt> dim_size, bool) {
    return meta_reduce(kScatterStd, src, index, dim, dim_size);
  });
  m.impl(kSoftmaxCsr, [](const at::Tensor& src, const at::Tensor& indptr, int64_t dim) {
    check_indptr_args(kSoftmaxCsr.name().c_str(), src, indptr, dim);
    return at::empty_like(src, at::MemoryFormat::Contiguous);
  });
  m.impl(kScatterSoftmaxBackward, [](const at::Tensor& grad, const at::Tensor& out, const at::Tensor& index,
                                     int64_t dim, std::optional<int64_t> dim_size, bool) {
    const char* op = kScatterSoftmaxBackward.name().c_str();
    torchplug::core::check_same_dtype(op, TORCHPLUG_ARG(grad), TORCHPLUG_ARG(out));
    TORCH_CHECK(grad.sym_sizes() == out.sym_sizes(), op, ": argument 'grad' of shape ", grad.sym_sizes(),
                " does not match out of shape ", out.sym_sizes());
    return meta_emit(grad, index, dim, dim_size, op);
  });
}
