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
#include "torchplug/core/library.h"

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
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

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
  dim = core::normalize_dim(kScatter.of<Policy>().name().c_str(), dim, src.dim());
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
// A 1-D index (the common case) goes through gather_coo's kernel, which gives
// those zeros itself.
at::Tensor gather_slots(const char* op, const Saved& s, const at::Tensor& values) {
  if (s.index.dim() == 1) {
    std::vector<int64_t> shape(s.dim + 1, 1);
    shape[s.dim] = -1;
    return call_gather_coo(values, s.index.view(shape));
  }
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
  const char* op = kScatter.of<MulPolicy>().name().c_str();
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
  const char* op = kScatter.of<Policy>().name().c_str();
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

// The ops whose gradients these are: scatter_<r>, and segment_<r>_coo, which
// is scatter_<r> along index.dim() - 1.
template <typename Policy>
struct ScatterOp {
  static Result<Policy> call(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                             std::optional<c10::SymInt> dim_size) {
    return call_scatter<Policy>(src, index, dim, std::move(dim_size));
  }
  static InplaceResult<Policy> call_(const at::Tensor& out, const at::Tensor& src,
                                     const at::Tensor& index, int64_t dim) {
    return call_scatter_<Policy>(out, src, index, dim);
  }
};

template <typename Policy>
struct SegmentCooOp {
  static Result<Policy> call(const at::Tensor& src, const at::Tensor& index, int64_t,
                             std::optional<c10::SymInt> dim_size) {
    return call_segment_coo<Policy>(src, index, std::move(dim_size));
  }
  static InplaceResult<Policy> call_(const at::Tensor& out, const at::Tensor& src,
                                     const at::Tensor& index, int64_t) {
    return call_segment_coo_<Policy>(out, src, index);
  }
};

template <typename Policy, typename Op>
class ScatterFunction : public torch::autograd::Function<ScatterFunction<Policy, Op>> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index,
                               int64_t dim, std::optional<c10::SymInt> dim_size) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    if constexpr (Policy::kHasArg) {
      auto [out, arg] = Op::call(src, index, dim, std::move(dim_size));
      save<Policy>(ctx, src, index, dim, out, arg);
      ctx->mark_non_differentiable({arg});
      return {out, arg};
    } else {
      auto out = Op::call(src, index, dim, std::move(dim_size));
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

template <typename Policy, typename Op>
class ScatterInplaceFunction : public torch::autograd::Function<ScatterInplaceFunction<Policy, Op>> {
 public:
  static variable_list forward(AutogradContext* ctx, Variable out, const Variable& src,
                               const Variable& index, int64_t dim, OldValues old) {
    at::Tensor arg;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      if constexpr (Policy::kHasArg) {
        arg = Op::call_(out, src, index, dim);
      } else {
        Op::call_(out, src, index, dim);
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

// segment_coo's Autograd kernel: scatter's Function along index.dim() - 1
// (the op takes no dim, so core::autograd_kernel does not fit it).
template <typename Policy>
Result<Policy> segment_coo_autograd(const at::Tensor& src, const at::Tensor& index,
                                    std::optional<c10::SymInt> dim_size) {
  core::check_autograd_support(kSegmentCoo.of<Policy>().name().c_str(), {TORCHPLUG_ARG(src)});
  if (!core::records_grad(src)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_segment_coo<Policy>(src, index, std::move(dim_size));
  }
  auto outputs = ScatterFunction<Policy, SegmentCooOp<Policy>>::apply(src, index, index.dim() - 1, std::move(dim_size));
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

template <typename Policy, typename Op = ScatterOp<Policy>>
InplaceResult<Policy> scatter_inplace_autograd(const at::Tensor& out, const at::Tensor& src,
                                               const at::Tensor& index, int64_t dim,
                                               const char* op = kScatter.of<Policy>().name().c_str()) {
  check_writable(op, out);
  core::check_autograd_support(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src)});
  if (!core::records_grad(out, src)) {
    at::Tensor arg;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      if constexpr (Policy::kHasArg) {
        arg = Op::call_(out, src, index, dim);
      } else {
        Op::call_(out, src, index, dim);
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
  auto outputs = ScatterInplaceFunction<Policy, Op>::apply(out, src, index, dim, std::move(old));
  if constexpr (Policy::kHasArg) return outputs[1];
}

// ---- segment_csr and the gathers ------------------------------------------------

// segment_csr as a scatter over each position's row, with one more slot for
// positions past the last segment (its gradient 0): scatter's gradients apply.
template <typename Policy>
class SegmentCsrFunction : public torch::autograd::Function<SegmentCsrFunction<Policy>> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& indptr) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    at::Tensor out, arg;
    if constexpr (Policy::kHasArg) {
      std::tie(out, arg) = call_segment_csr<Policy>(src, indptr);
      ctx->mark_non_differentiable({arg});
    } else {
      out = call_segment_csr<Policy>(src, indptr);
    }
    ctx->save_for_backward({indptr, Policy::kReduce == core::Reduce::kMul ? src : at::Tensor(), arg});
    ctx->saved_data["src_sizes"] = src.sizes();
    if constexpr (Policy::kHasArg) return {out, arg};
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& indptr = saved[0];
    const auto sizes = ctx->saved_data["src_sizes"].toIntVector();
    const int64_t dim = indptr.dim() - 1;
    const int64_t E = sizes[dim];
    auto leading = std::vector<int64_t>(sizes.begin(), sizes.begin() + dim);
    leading.push_back(indptr.size(-1));
    const int64_t outer = c10::multiply_integers(leading.begin(), leading.end() - 1);
    const auto rows = rows_of_positions(indptr.expand(leading).reshape({outer, indptr.size(-1)}), E);
    auto index_shape = std::vector<int64_t>(sizes.begin(), sizes.begin() + dim);
    index_shape.push_back(E);
    const auto pad = [&](const at::Tensor& t, const at::Scalar& value) {
      auto pad_sizes = t.sizes().vec();
      pad_sizes[dim] = 1;
      return at::cat({t, at::full(pad_sizes, value, t.options())}, dim);
    };
    const auto& grad = grad_outputs[0];
    Saved s{rows.dim() == 1 ? rows : rows.view(index_shape),
            saved[1],
            Policy::kHasArg ? pad(saved[2], E) : at::Tensor(),
            at::Tensor(),
            dim,
            c10::fromIntArrayRefSlow(sizes).vec(),
            c10::SymInt(grad.size(dim) + 1),
            true};
    return {gradients<Policy>(s, pad(grad, 0)).first, Variable()};
  }
};

class GatherCooFunction : public torch::autograd::Function<GatherCooFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({index});
    ctx->saved_data["src_sizes"] = src.sym_sizes();
    return {call_gather_coo(src, index)};
  }
  // The sum of the gradients of each src slice's positions (skipped positions add nothing).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto index = ctx->get_saved_variables()[0];
    auto grad = at::zeros_symint(ctx->saved_data["src_sizes"].toSymIntVector(), grad_outputs[0].options());
    call_scatter_<SumPolicy>(grad, grad_outputs[0], index, index.dim() - 1);
    return {grad, Variable()};
  }
};

class GatherCsrFunction : public torch::autograd::Function<GatherCsrFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& indptr,
                               std::optional<c10::SymInt> dim_size) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({indptr});
    return {call_gather_csr(src, indptr, std::move(dim_size))};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto indptr = ctx->get_saved_variables()[0];
    return {call_segment_csr<SumPolicy>(grad_outputs[0], indptr), Variable(), Variable()};
  }
};

// The out= forms that overwrite out (segment_csr_, gather_csr_, gather_coo_)
// are not differentiable, as PyTorch's out= variants are not: refused when
// autograd would record, else run below autograd with out's version bumped.
template <typename Return>
Return write_out(const core::OpDef& def, const at::Tensor& out, const at::Tensor& src, const at::Tensor& positions) {
  TORCH_CHECK(!core::records_grad(out, src), def.name(),
              ": the out= form does not support automatic differentiation; call it without out=");
  const auto op = core::find_op<Return(const at::Tensor&, const at::Tensor&, const at::Tensor&)>(def);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  if constexpr (std::is_void_v<Return>) {
    op.call(out, src, positions);
    torch::autograd::impl::bump_version(out);
  } else {
    auto result = op.call(out, src, positions);
    torch::autograd::impl::bump_version(out);
    return result;
  }
}

}  // namespace
}  // namespace torchplug::scatter_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, Autograd, m) {
  using namespace torchplug::scatter_detail;
  namespace core = torchplug::core;
  core::AllReductionOps::for_each([&](auto policy) {
    using Policy = decltype(policy);
    m.impl(kScatter.of<Policy>(),
           core::autograd_kernel<ScatterFunction<Policy, ScatterOp<Policy>>, Result<Policy>>(kScatter.of<Policy>()));
    m.impl(kScatterInplace.of<Policy>(), [](const at::Tensor& out, const at::Tensor& src,
                                            const at::Tensor& index, int64_t dim) {
      return scatter_inplace_autograd<Policy>(out, src, index, dim);
    });
    m.impl(kSegmentCoo.of<Policy>(), &segment_coo_autograd<Policy>);
    m.impl(kSegmentCooInplace.of<Policy>(), [](const at::Tensor& out, const at::Tensor& src,
                                               const at::Tensor& index) {
      return scatter_inplace_autograd<Policy, SegmentCooOp<Policy>>(
          out, src, index, index.dim() - 1, kSegmentCoo.of<Policy>().name().c_str());
    });
    m.impl(kSegmentCsr.of<Policy>(),
           core::autograd_kernel<SegmentCsrFunction<Policy>, Result<Policy>>(kSegmentCsr.of<Policy>()));
    m.impl(kSegmentCsrInplace.of<Policy>(), [](const at::Tensor& out, const at::Tensor& src,
                                               const at::Tensor& indptr) {
      return write_out<InplaceResult<Policy>>(kSegmentCsrInplace.of<Policy>(), out, src, indptr);
    });
  });
  m.impl(kGatherCoo, core::autograd_kernel<GatherCooFunction, at::Tensor>(kGatherCoo));
  m.impl(kGatherCsr, core::autograd_kernel<GatherCsrFunction, at::Tensor>(kGatherCsr));
  m.impl(kGatherCsrInplace, [](const at::Tensor& out, const at::Tensor& src, const at::Tensor& indptr) {
    write_out<void>(kGatherCsrInplace, out, src, indptr);
  });
  m.impl(kGatherCooInplace, [](const at::Tensor& out, const at::Tensor& src, const at::Tensor& index) {
    write_out<void>(kGatherCooInplace, out, src, index);
  });
}
