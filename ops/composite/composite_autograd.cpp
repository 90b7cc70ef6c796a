// Autograd of the composites, with y the op's output and g its gradient:
//   softmax      y * (g - S[row]),      S = sum over the row of g * y
//   log_softmax  g - exp(y) * S[row],   S = sum over the row of g
//   logsumexp    g[row] * exp(src - y[row])
//   std          g[row] * (src - mean[row]) / (divisor[row] * y[row]), 0 where y is 0
// softmax and log_softmax take the fused backward op (one row program); when
// backward itself is recorded (create_graph) they, like logsumexp and std,
// are built from differentiable ops (scatter_sum, gather), so double backward
// works. A source whose index names no row (skipped on CUDA outside checked
// mode) gets a zero gradient. scatter_logsumexp_ (into out) is not differentiable.

#include "composite.h"
#include "composite_kernel.h"
#include "torchplug/core/autograd.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>
#include <c10/core/GradMode.h>
#include <torch/autograd.h>

namespace torchplug::composite_detail {
namespace {

using core::MeanPolicy;
using core::SumPolicy;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// The scatter plugin's sum or mean, through the dispatcher (DEPENDS scatter).
at::Tensor scatter_reduce(bool mean, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                          std::optional<c10::SymInt> slots) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, std::optional<c10::SymInt>);
  static const auto sum_op = core::find_op<Signature>("torchplug::scatter_sum");
  static const auto mean_op = core::find_op<Signature>("torchplug::scatter_mean");
  return (mean ? mean_op : sum_op).call(src, index, dim, std::move(slots));
}

std::optional<c10::SymInt> sym(std::optional<int64_t> size) {
  if (!size) return std::nullopt;
  return c10::SymInt(*size);
}

// values ([*, N, *]) read at each source's row, broadcast to `like`'s shape,
// and whether the source's row lies in [0, N) (0 read where not). N comes
// from a forward output: under torch.compile AOTAutograd's partitioner
// refuses a size read off a gradient.
std::pair<at::Tensor, at::Tensor> at_rows(const char* op, const at::Tensor& values, const at::Tensor& index,
                                          const at::Tensor& like, int64_t dim, const c10::SymInt& slots) {
  const auto rows = core::broadcast(op, index, like, dim);
  const auto inside = rows.ge(0).logical_and_(rows.lt(slots));
  const auto safe = at::where(inside, rows, 0);
  return {at::where(inside, at::gather(values, dim, safe), 0), inside};
}

// The src gradient of softmax (log: log_softmax) from g and the output y.
at::Tensor softmax_grad(const at::Tensor& g, const at::Tensor& y, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size, bool log) {
  if (!c10::GradMode::is_enabled()) return call_softmax_backward(g, y, index, dim, dim_size, log);
  const char* op = kScatterSoftmaxBackward.name().c_str();
  const auto sums = scatter_reduce(false, log ? g : g * y, index, dim, sym(dim_size));
  const auto [at_row, inside] = at_rows(op, sums, index, g, dim, sums.sym_size(dim));
  return at::where(inside, log ? g - at::exp(y) * at_row : y * (g - at_row), 0);
}

class SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                               std::optional<int64_t> dim_size, bool log) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const auto out = call_softmax(src, index, dim, dim_size, log);
    ctx->save_for_backward({index, out});
    ctx->saved_data["dim"] = core::normalize_dim(kScatterSoftmax.name().c_str(), dim, src.dim());
    ctx->saved_data["dim_size"] = dim_size.has_value() ? c10::IValue(*dim_size) : c10::IValue();
    ctx->saved_data["log"] = log;
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto size = ctx->saved_data["dim_size"];
    return {softmax_grad(grads[0], saved[1], saved[0], ctx->saved_data["dim"].toInt(),
                         size.isNone() ? std::nullopt : std::optional<int64_t>(size.toInt()),
                         ctx->saved_data["log"].toBool()),
            Variable(), Variable(), Variable(), Variable()};
  }
};

class SoftmaxCsrFunction : public torch::autograd::Function<SoftmaxCsrFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& indptr, int64_t dim) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const auto out = softmax_csr(src, indptr, dim);
    ctx->save_for_backward({indptr, out});
    ctx->saved_data["dim"] = core::normalize_dim(kSoftmaxCsr.name().c_str(), dim, src.dim());
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const auto rows = csr_rows(saved[0], saved[1].size(dim));
    return {softmax_grad(grads[0], saved[1], rows, dim, saved[0].size(0) - 1, false), Variable(), Variable()};
  }
};

class LogSumExpFunction : public torch::autograd::Function<LogSumExpFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                               std::optional<c10::SymInt> dim_size) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const auto out = call_logsumexp(src, index, dim, std::move(dim_size));
    ctx->save_for_backward({src, index, out});
    ctx->saved_data["dim"] = core::normalize_dim(kScatterLogsumexp.name().c_str(), dim, src.dim());
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const char* op = kScatterLogsumexp.name().c_str();
    const auto saved = ctx->get_saved_variables();
    const auto &src = saved[0], &index = saved[1], &out = saved[2];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const auto slots = out.sym_size(dim);
    const auto [g, inside] = at_rows(op, grads[0], index, src, dim, slots);
    const auto [y, unused] = at_rows(op, out, index, src, dim, slots);
    return {at::where(inside, g * at::exp(src - y), 0), Variable(), Variable(), Variable()};
  }
};

class StdFunction : public torch::autograd::Function<StdFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                               std::optional<c10::SymInt> dim_size, bool unbiased) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const auto out = call_std(src, index, dim, std::move(dim_size), unbiased);
    ctx->save_for_backward({src, index, out});
    ctx->saved_data["dim"] = core::normalize_dim(kScatterStd.name().c_str(), dim, src.dim());
    ctx->saved_data["unbiased"] = unbiased;
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const char* op = kScatterStd.name().c_str();
    const auto saved = ctx->get_saved_variables();
    const auto &src = saved[0], &index = saved[1], &out = saved[2];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const auto slots = out.sym_size(dim);
    // In double, as the forward: float32 deviations from the mean of nearly
    // equal values cancel (and a float16 count is inf past 65504 members).
    const auto math = at::kDouble;
    const auto x = src.to(math);
    const auto y = out.to(math);
    const auto count = scatter_reduce(false, at::ones_like(x), index, dim, slots);
    const auto mean = scatter_reduce(true, x, index, dim, slots);
    const auto divisor = (ctx->saved_data["unbiased"].toBool() ? count - 1 : count).clamp_min(1);
    const auto scale = grads[0].to(math) / (divisor * at::where(y.eq(0), 1, y));
    const auto [scale_at, inside] = at_rows(op, at::where(y.eq(0), 0, scale), index, src, dim, slots);
    const auto [mean_at, unused] = at_rows(op, mean, index, src, dim, slots);
    return {(scale_at * (x - mean_at)).to(src.scalar_type()), Variable(), Variable(), Variable(), Variable()};
  }
};

at::Tensor softmax_autograd(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<int64_t> dim_size, bool log) {
  const char* op = log ? kScatterLogSoftmax.name().c_str() : kScatterSoftmax.name().c_str();
  core::check_autograd_support(op, {TORCHPLUG_ARG(src)});
  if (!core::records_grad(src)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_softmax(src, index, dim, dim_size, log);
  }
  return SoftmaxFunction::apply(src, index, dim, dim_size, log)[0];
}

}  // namespace
}  // namespace torchplug::composite_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, Autograd, m) {
  using namespace torchplug::composite_detail;
  using torchplug::core::autograd_kernel;
  using torchplug::core::records_grad;
  m.impl(kScatterSoftmax, [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                               std::optional<int64_t> dim_size) {
    return softmax_autograd(src, index, dim, dim_size, false);
  });
  m.impl(kScatterLogSoftmax, [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                   std::optional<int64_t> dim_size) {
    return softmax_autograd(src, index, dim, dim_size, true);
  });
  m.impl(kSoftmaxCsr, autograd_kernel<SoftmaxCsrFunction, at::Tensor>(kSoftmaxCsr));
  m.impl(kScatterLogsumexp, autograd_kernel<LogSumExpFunction, at::Tensor>(kScatterLogsumexp));
  m.impl(kScatterLogsumexpInplace, [](const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                                  int64_t dim) {
    TORCH_CHECK(!records_grad(out, src), kScatterLogsumexpInplace.name(),
                ": the out= form does not support automatic differentiation; call it without out=");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    call_logsumexp_(out, src, index, dim);
    torch::autograd::impl::bump_version(out);
  });
  m.impl(kScatterStd, autograd_kernel<StdFunction, at::Tensor>(kScatterStd));
}
