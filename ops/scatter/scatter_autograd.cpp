// Autograd of the scatter family. Each src element lands in one output slot,
// so each backward reads grad_out at that slot (a gather along dim with the
// broadcast index) and scales it by what the reduction makes of the element:
//   sum   1
//   mean  1 / count (the count is the sum of ones, at least 1)
//   mul   the product of the slot's other values (out's included), exact
//         where the slot holds zeros (mul_src_grad)
//   min, max  1 at the arg position, 0 elsewhere (a scatter of grad_out to arg)
// Every backward is built from differentiable ops, so double backward works.
// The in-place forms also pass a gradient to out's original values: grad_out
// (sum), grad_out / count (mean), grad_out * product of the sources (mul),
// grad_out where arg says no source holds the result (min, max).
//
// CUDA kernels outside checked mode skip index values outside [0, N): those
// src elements get a zero gradient, and backward never gathers out of bounds.

#include "scatter_kernel.h"
#include "torchplug/core/autograd.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scatter.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace torchplug::scatter_detail {
namespace {

using core::MaxPolicy;
using core::MeanPolicy;
using core::MinPolicy;
using core::MulPolicy;
using core::SumPolicy;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// Saves what every backward needs: the index as given (broadcast again in
// backward, as a view), src's shape, dim, the number of slots along dim, and
// whether every index value was validated; mul also keeps src, min and max
// their arg, and mul's in-place form out's values from before the write.
// The slot count comes from forward's output: under torch.compile it may be
// an unbacked symbol, which backward cannot read off grad_out (AOTAutograd's
// partitioner refuses a size taken from a tangent).
template <typename Policy>
void save(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index, int64_t dim,
          const at::Tensor& out, const at::Tensor& arg) {
  dim = core::normalize_dim(kOpName<Policy>, dim, src.dim());
  ctx->save_for_backward({index, Policy::kReduce == core::Reduce::kMul ? src : at::Tensor(), arg});
  ctx->saved_data["dim"] = dim;
  ctx->saved_data["src_sizes"] = src.sym_sizes();
  ctx->saved_data["slots"] = out.sym_size(dim);
  ctx->saved_data["validated"] = core::validates_indices(src.device());
}

// What backward reads back from the context.
struct Saved {
  at::Tensor index, src, arg, base;
  int64_t dim;
  std::vector<c10::SymInt> src_sizes;
  c10::SymInt slots;
  bool validated;
};

Saved load(AutogradContext* ctx) {
  const auto saved = ctx->get_saved_variables();
  return {saved[0],
          saved[1],
          saved[2],
          at::Tensor(),
          ctx->saved_data["dim"].toInt(),
          ctx->saved_data["src_sizes"].toSymIntVector(),
          ctx->saved_data["slots"].toSymInt(),
          ctx->saved_data["validated"].toBool()};
}

// values (out's shape) read at each src element's slot; 0 for skipped elements,
// which read a slot of zeros appended past the last (no guard on the output
// size, which may be an unbacked symbol under torch.compile).
at::Tensor gather_slots(const char* op, const Saved& s, const at::Tensor& values) {
  if (s.validated) return at::gather(values, s.dim, core::broadcast(op, s.index, s.src_sizes, s.dim));
  const auto& size = s.slots;
  auto pad_sizes = values.sym_sizes().vec();
  pad_sizes[s.dim] = 1;
  const auto padded = at::cat({values, at::zeros_symint(pad_sizes, values.options())}, s.dim);
  const auto inside = s.index.ge(0).logical_and_(s.index.lt(size));
  const auto safe = at::where(inside, s.index, at::scalar_tensor(size, s.index.options()));
  return at::gather(padded, s.dim, core::broadcast(op, safe, s.src_sizes, s.dim));
}

// The reduction of values into slots shaped like `like`, starting from
// `start` (the in-place op: no output size to pass, which under torch.compile
// may be an unbacked symbol that backward cannot take from forward).
template <typename Policy>
at::Tensor reduce_like(const Saved& s, const at::Tensor& values, const at::Tensor& like, double start) {
  auto result = at::full_like(like, start, values.options());
  call_scatter_<Policy>(result, values, s.index, s.dim);
  return result;
}

// How many src elements land in each slot, at least 1, in grad's dtype.
at::Tensor clamped_count(const Saved& s, const at::Tensor& grad) {
  return reduce_like<SumPolicy>(s, at::ones_symint(s.src_sizes, grad.options()), grad, 0).clamp_min(1);
}

// grad_out scattered to the arg positions (arg == src.size(dim) goes nowhere).
at::Tensor scatter_to_arg(const Saved& s, const at::Tensor& grad, const at::Tensor& arg) {
  auto sizes = s.src_sizes;
  sizes[s.dim] = sizes[s.dim] + 1;  // a slot for the empty ones, cut off below
  return at::zeros_symint(sizes, grad.options())
      .scatter(s.dim, arg, grad)
      .narrow_symint(s.dim, 0, s.src_sizes[s.dim]);
}

// The src gradient of mul: grad_out * (out's values, when given) gathered,
// times the product of the slot's other sources, written so that its own
// derivative is right too (double backward), zeros included: for a nonzero
// element, (product of the nonzero sources / it) * (product of the zero
// sources, 0 or 1); for a zero, the product of the nonzero sources when it is
// the slot's only zero, times the other zero (0, but not to autograd) when
// there are two, 0 when more.
at::Tensor mul_src_grad(const Saved& s, const at::Tensor& grad_times_base) {
  const char* op = kOpName<MulPolicy>;
  const auto& like = grad_times_base;
  const auto zero = s.src.eq(0);
  const auto at_slot = [&](const at::Tensor& slots) { return gather_slots(op, s, slots); };
  const auto zeros = at_slot(reduce_like<SumPolicy>(s, zero.to(s.src.scalar_type()), like, 0));
  const auto nonzero_product = at_slot(reduce_like<MulPolicy>(s, s.src.masked_fill(zero, 1), like, 1));
  const auto zero_product = at_slot(reduce_like<MulPolicy>(s, at::where(zero, s.src, 1), like, 1));
  const auto zero_sum = at_slot(reduce_like<SumPolicy>(s, at::where(zero, s.src, 0), like, 0));
  const auto for_zero = at::where(zeros.eq(1), nonzero_product,
                                  at::where(zeros.eq(2), nonzero_product * (zero_sum - s.src), 0));
  const auto for_nonzero = nonzero_product / s.src.masked_fill(zero, 1) * zero_product;
  return at_slot(grad_times_base) * at::where(zero, for_zero, for_nonzero);
}

// The src gradient, and the gradient of out's original values (the in-place
// forms; s.base holds them for mul).
template <typename Policy>
std::pair<at::Tensor, at::Tensor> gradients(const Saved& s, const at::Tensor& grad) {
  constexpr const char* op = kOpName<Policy>;
  if constexpr (Policy::kReduce == core::Reduce::kSum) {
    return {gather_slots(op, s, grad), grad};
  } else if constexpr (Policy::kReduce == core::Reduce::kMean) {
    const auto scaled = grad / clamped_count(s, grad);
    return {gather_slots(op, s, scaled), scaled};
  } else if constexpr (Policy::kReduce == core::Reduce::kMul) {
    const auto src_grad = mul_src_grad(s, s.base.defined() ? grad * s.base : grad);
    if (!s.base.defined()) return {src_grad, at::Tensor()};
    return {src_grad, grad * reduce_like<MulPolicy>(s, s.src, grad, 1)};
  } else {
    const auto empty = s.arg.eq(s.src_sizes[s.dim]);
    return {scatter_to_arg(s, grad, s.arg), at::where(empty, grad, 0)};
  }
}

template <typename Policy>
class ScatterFunction : public torch::autograd::Function<ScatterFunction<Policy>> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index,
                               int64_t dim, std::optional<c10::SymInt> dim_size) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    if constexpr (Policy::kHasArg) {
      auto [out, arg] = call_scatter<Policy>(src, index, dim, std::move(dim_size));
      save<Policy>(ctx, src, index, dim, out, arg);
      ctx->mark_non_differentiable({arg});
      return {out, arg};
    } else {
      auto out = call_scatter<Policy>(src, index, dim, std::move(dim_size));
      save<Policy>(ctx, src, index, dim, out, at::Tensor());
      return {out};
    }
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return {gradients<Policy>(load(ctx), grad_outputs[0]).first, Variable(), Variable(), Variable()};
  }
};

// Out's values before an in-place write, handed to the Function as a plain
// value (not an input: its history reaches out's old one on its own).
struct OldValues {
  at::Tensor values;
};

template <typename Policy>
class ScatterInplaceFunction : public torch::autograd::Function<ScatterInplaceFunction<Policy>> {
 public:
  static variable_list forward(AutogradContext* ctx, Variable out, const Variable& src,
                               const Variable& index, int64_t dim, OldValues old) {
    at::Tensor arg;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      if constexpr (Policy::kHasArg) {
        arg = call_scatter_<Policy>(out, src, index, dim);
      } else {
        call_scatter_<Policy>(out, src, index, dim);
      }
    }
    save<Policy>(ctx, src, index, dim, out, arg);
    if (old.values.defined()) ctx->saved_data["old"] = old.values;
    ctx->mark_dirty({out});
    if constexpr (Policy::kHasArg) {
      ctx->mark_non_differentiable({arg});
      return {out, arg};
    } else {
      return {out};
    }
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    Saved saved = load(ctx);
    if (ctx->saved_data.count("old")) saved.base = ctx->saved_data["old"].toTensor();
    auto [src_grad, base_grad] = gradients<Policy>(saved, grad_outputs[0]);
    return {base_grad, src_grad, Variable(), Variable(), Variable()};
  }
};

template <typename Policy>
Result<Policy> scatter_autograd(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                std::optional<c10::SymInt> dim_size) {
  core::check_autograd_support(kOpName<Policy>, {TORCHPLUG_ARG(src)});
  if (!core::records_grad(src)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_scatter<Policy>(src, index, dim, std::move(dim_size));
  }
  auto outputs = ScatterFunction<Policy>::apply(src, index, dim, std::move(dim_size));
  if constexpr (Policy::kHasArg) {
    return {outputs[0], outputs[1]};
  } else {
    return outputs[0];
  }
}

// Refused before anything is written, as PyTorch's own in-place ops do.
void check_writable(const char* op, const at::Tensor& out) {
  TORCH_CHECK(!(at::GradMode::is_enabled() && out.requires_grad() && out.is_leaf()), op,
              ": argument 'out' is a leaf tensor that requires grad and cannot be written in place");
}

template <typename Policy>
InplaceResult<Policy> scatter_inplace_autograd(const at::Tensor& out, const at::Tensor& src,
                                               const at::Tensor& index, int64_t dim) {
  check_writable(kOpName<Policy>, out);
  core::check_autograd_support(kOpName<Policy>, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src)});
  if (!core::records_grad(out, src)) {
    at::Tensor arg;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      if constexpr (Policy::kHasArg) {
        arg = call_scatter_<Policy>(out, src, index, dim);
      } else {
        call_scatter_<Policy>(out, src, index, dim);
      }
    }
    // What mark_dirty does otherwise: autograd then refuses a backward through
    // an op that saved out's old values.
    torch::autograd::impl::bump_version(out);
    if constexpr (Policy::kHasArg) {
      return arg;
    } else {
      return;
    }
  }
  // The returned out is out itself; mark_dirty has already rebased its history.
  // mul's gradients need out's values from before the write: a copy made
  // here, with autograd on, so that double backward reaches out through it.
  OldValues old{Policy::kReduce == core::Reduce::kMul ? out.clone() : at::Tensor()};
  auto outputs = ScatterInplaceFunction<Policy>::apply(out, src, index, dim, std::move(old));
  if constexpr (Policy::kHasArg) return outputs[1];
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCH_LIBRARY_IMPL(torchplug, Autograd, m) {
  using namespace torchplug::scatter_detail;
#define TORCHPLUG_AUTOGRAD(name, Policy)                             \
  m.impl("scatter_" #name, &scatter_autograd<Policy>);              \
  m.impl("scatter_" #name "_", &scatter_inplace_autograd<Policy>);
  TORCHPLUG_FOR_EACH_REDUCTION(TORCHPLUG_AUTOGRAD)
#undef TORCHPLUG_AUTOGRAD
}
