// example::segment_l2norm: the checks, Meta kernel, the body both devices run,
// autograd and the C++ API. The device kernels are in segment_l2norm_cpu.cpp
// and segment_l2norm_cuda.cu: each hands its segment sum to
// segment_l2norm_by.

#include "example.h"

#include "segment_l2norm_kernel.h"

#include <torchplug/core/autograd.h>
#include <torchplug/core/checks.h>
#include <torchplug/core/library.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/where.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>

#include <optional>

namespace example {
namespace detail {

namespace core = torchplug::core;

at::Tensor segment_l2norm_meta(const at::Tensor& src, const at::Tensor& indptr) {
  const char* op = kSegmentL2Norm.name().c_str();
  kSegmentL2Norm.check_dtypes({TORCHPLUG_ARG(src)});
  TORCHPLUG_CHECK_INDEX(op, indptr);
  core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
  TORCH_CHECK(src.dim() >= 1, op, ": argument 'src' must have at least one dimension [E, *], got a scalar");
  TORCH_CHECK(indptr.dim() == 1 && indptr.sym_size(0) >= 1, op,
              ": argument 'indptr' must be 1-D [N + 1] with N >= 0, got shape ", indptr.sym_sizes());
  auto sizes = src.sym_sizes().vec();
  sizes[0] = indptr.sym_size(0) - 1;
  return at::empty_symint(sizes, src.options());
}

at::Tensor segment_l2norm_by(const at::Tensor& src, const at::Tensor& indptr, SegmentSum segment_sum) {
  const char* op = kSegmentL2Norm.name().c_str();
  const auto out = segment_l2norm_meta(src, indptr);
  const c10::DeviceGuard guard(src.device());
  const auto offsets = indptr.contiguous();
  const int64_t E = src.size(0);
  if (core::validates_indices(src.device())) core::check_offsets(op, "indptr", offsets, E, "src.size(0)");
  // The layer's problem: src viewed as [1, E, inner], reduced along E into
  // out viewed as [1, N, inner]. The squares are written contiguous, as the
  // kernels read them.
  core::ScatterProblem squares;
  squares.src = at::empty(src.sizes(), src.options());
  at::mul_out(squares.src, src, src);
  squares.E = E;
  squares.inner = c10::multiply_integers(src.sizes().slice(1));
  squares.N = out.size(0);
  squares.out = out;
  segment_sum(squares, offsets);
  return out.sqrt_();
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// torchplug::gather_csr(src, indptr, dim_size): row i of src for each
// position of segment i, through the dispatcher (the scatter plugin, which
// this library links: DEPENDS scatter).
at::Tensor gather_csr(const at::Tensor& src, const at::Tensor& indptr, const c10::SymInt& positions) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, std::optional<c10::SymInt>);
  static const auto op = core::find_op<Signature>("torchplug::gather_csr");
  return op.call(src, indptr, positions);
}

// grad_src[j] = src[j] * grad[i] / out[i] for j in segment i, and 0 where
// out[i] is 0 (a segment of zeros), as torch.linalg.vector_norm's gradient.
// Built from differentiable ops (gather_csr's backward is a segment sum), so
// that second derivatives work.
struct SegmentL2NormFunction : torch::autograd::Function<SegmentL2NormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& indptr) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto out = segment_l2norm(src, indptr);
    ctx->save_for_backward({src, indptr, out});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &src = saved[0], &indptr = saved[1], &out = saved[2];
    // Divided by 1 where out is 0: no infinity reaches the gradient, nor a
    // NaN its derivative.
    const auto zero = out.eq(0);
    const auto scale = at::where(zero, 0, grads[0].div(at::where(zero, 1, out)));
    return {src.mul(gather_csr(scale, indptr, src.sym_size(0))), at::Tensor()};
  }
};

}  // namespace
}  // namespace detail

at::Tensor segment_l2norm(const at::Tensor& src, const at::Tensor& indptr) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&);
  static const auto op = torchplug::core::find_op<Signature>(detail::kSegmentL2Norm);
  return op.call(src, indptr);
}

}  // namespace example

TORCHPLUG_LIBRARY(example, m) { m.define(example::detail::kSegmentL2Norm); }
TORCHPLUG_LIBRARY_IMPL(example, Meta, m) {
  m.impl(example::detail::kSegmentL2Norm, &example::detail::segment_l2norm_meta);
}
TORCHPLUG_LIBRARY_IMPL(example, Autograd, m) {
  m.impl(example::detail::kSegmentL2Norm,
         torchplug::core::autograd_kernel<example::detail::SegmentL2NormFunction>(example::detail::kSegmentL2Norm));
}
