// example::edge_dot: the op's declaration, C++ API, checks, Meta kernel and
// autograd. The CPU and CUDA kernels are in example_cpu.cpp and example_cuda.cu.

#include "example.h"

#include "example_kernel.h"

#include <torchplug/core/autograd.h>
#include <torchplug/core/checks.h>
#include <torchplug/core/library.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

namespace example {
namespace detail {

// Declared once: the schema, the dtypes the kernels take (the checks read this
// list and torchplug.registry() reports it) and one line for the docs.
const torchplug::core::OpDef kEdgeDot{
    "example::edge_dot(Tensor x, Tensor y, Tensor src, Tensor dst) -> Tensor",
    {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16},
    "out[e] = dot(x[src[e]], y[dst[e]]): one score per edge."};

at::Tensor edge_dot_meta(const at::Tensor& x, const at::Tensor& y, const at::Tensor& src, const at::Tensor& dst) {
  namespace core = torchplug::core;
  kEdgeDot.check_dtypes({TORCHPLUG_ARG(x), TORCHPLUG_ARG(y)});
  core::check_same_dtype(kOp, TORCHPLUG_ARG(x), TORCHPLUG_ARG(y));
  TORCHPLUG_CHECK_INDEX(kOp, src);
  TORCHPLUG_CHECK_INDEX(kOp, dst);
  core::check_same_device(kOp, {TORCHPLUG_ARG(x), TORCHPLUG_ARG(y), TORCHPLUG_ARG(src), TORCHPLUG_ARG(dst)});
  // Sizes as symbols: under torch.compile they may be dynamic.
  TORCH_CHECK(x.dim() == 2, kOp, ": argument 'x' must be 2-D [N, F], got shape ", x.sym_sizes());
  TORCH_CHECK(y.dim() == 2, kOp, ": argument 'y' must be 2-D [M, F], got shape ", y.sym_sizes());
  TORCH_CHECK(src.dim() == 1, kOp, ": argument 'src' must be 1-D [E], got shape ", src.sym_sizes());
  TORCH_CHECK(dst.dim() == 1, kOp, ": argument 'dst' must be 1-D [E], got shape ", dst.sym_sizes());
  TORCH_CHECK(x.sym_size(1) == y.sym_size(1), kOp,
              ": arguments 'x' and 'y' must have the same number of features F (dim 1), got x of shape ",
              x.sym_sizes(), " and y of shape ", y.sym_sizes());
  TORCH_CHECK(src.sym_size(0) == dst.sym_size(0), kOp,
              ": arguments 'src' and 'dst' must have the same number of edges, got ", src.sym_size(0), " and ",
              dst.sym_size(0));
  return at::empty_symint({src.sym_size(0)}, x.options());
}

namespace {

// Rows of unit stride are read in place (a column slice h[:, :F] included).
at::Tensor rows(const at::Tensor& t) { return t.size(1) <= 1 || t.stride(1) == 1 ? t : t.contiguous(); }

// Every value of index is a row of `of`, which has `size` rows.
void check_range(const char* arg, const at::Tensor& index, int64_t size, const char* of) {
  const auto bounds = torchplug::core::index_bounds(index);
  TORCH_CHECK_INDEX(bounds.min >= 0, kOp, ": argument '", arg, "' holds the negative value ", bounds.min,
                    "; expected values in [0, ", size, ") (the rows of ", of, ")");
  TORCH_CHECK_INDEX(bounds.max < size, kOp, ": argument '", arg, "' holds the value ", bounds.max,
                    ", out of range for ", of, " of ", size, " rows; expected values in [0, ", size, ")");
}

}  // namespace

EdgeDotInputs prepare(const at::Tensor& x, const at::Tensor& y, const at::Tensor& src, const at::Tensor& dst) {
  auto out = edge_dot_meta(x, y, src, dst);
  EdgeDotInputs in{rows(x), rows(y), src.contiguous(), dst.contiguous(), std::move(out),
                   x.size(0), y.size(0), src.size(0), x.size(1)};
  if (torchplug::core::validates_indices(x.device())) {
    check_range("src", in.src, in.N, "x");
    check_range("dst", in.dst, in.M, "y");
  }
  return in;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// grad_x[n] = sum over the edges e leaving n of grad[e] * y[dst[e]], and
// grad_y likewise: built from index_select and index_add, which are
// differentiable themselves, so that second derivatives work.
struct EdgeDotFunction : torch::autograd::Function<EdgeDotFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y, const at::Tensor& src,
                            const at::Tensor& dst) {
    ctx->save_for_backward({x, y, src, dst});
    ctx->saved_data["validated"] = torchplug::core::validates_indices(x.device());
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return edge_dot(x, y, src, dst);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto x = saved[0], y = saved[1], src = saved[2], dst = saved[3];
    const auto N = x.sym_size(0), M = y.sym_size(0);
    const bool validated = ctx->saved_data["validated"].toBool();
    if (!validated) {
      // CUDA outside checked mode: an edge with an index out of range scored 0
      // and gets no gradient. It reads a row of zeros appended to x and to y
      // and sends its gradient to that row, which is dropped.
      const auto inside = src.ge(0).logical_and_(src.lt(N)).logical_and_(dst.ge(0)).logical_and_(dst.lt(M));
      src = at::where(inside, src, at::scalar_tensor(N, src.options()));
      dst = at::where(inside, dst, at::scalar_tensor(M, dst.options()));
      x = at::cat({x, at::zeros_symint({1, x.sym_size(1)}, x.options())});
      y = at::cat({y, at::zeros_symint({1, y.sym_size(1)}, y.options())});
    }
    const auto grad = grads[0].unsqueeze(-1);  // [E, 1]
    at::Tensor grad_x, grad_y;
    if (ctx->needs_input_grad(0)) {
      grad_x = at::zeros_symint(x.sym_sizes(), grad.options()).index_add(0, src, grad.mul(y.index_select(0, dst)));
      if (!validated) grad_x = grad_x.narrow_symint(0, 0, N);
    }
    if (ctx->needs_input_grad(1)) {
      grad_y = at::zeros_symint(y.sym_sizes(), grad.options()).index_add(0, dst, grad.mul(x.index_select(0, src)));
      if (!validated) grad_y = grad_y.narrow_symint(0, 0, M);
    }
    return {grad_x, grad_y, at::Tensor(), at::Tensor()};
  }
};

}  // namespace
}  // namespace detail

// The C++ API: through the dispatcher, so autograd and every backend apply.
at::Tensor edge_dot(const at::Tensor& x, const at::Tensor& y, const at::Tensor& src, const at::Tensor& dst) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
  static const auto op = torchplug::core::find_op<Signature>(detail::kEdgeDot);
  return op.call(x, y, src, dst);
}

}  // namespace example

TORCHPLUG_LIBRARY(example, m) { m.define(example::detail::kEdgeDot); }
TORCHPLUG_LIBRARY_IMPL(example, Meta, m) { m.impl("edge_dot", &example::detail::edge_dot_meta); }
TORCHPLUG_LIBRARY_IMPL(example, Autograd, m) {
  m.impl("edge_dot", torchplug::core::autograd_kernel<example::detail::EdgeDotFunction>(example::detail::kEdgeDot));
}
