// Segments and gathers: the scatter family over sorted positions, with
// torch_scatter's semantics. Schemas, registry entries, C++ API, input checks,
// planning shared by the CPU and CUDA kernels, and the Meta kernels:
//   segment_<r>_csr(src, indptr)             -> out   (min, max: (out, arg))
//   segment_<r>_csr_(out, src, indptr)       -> ()    (min, max: arg)  out overwritten
//   segment_<r>_coo(src, index, dim_size)    -> out   (min, max: (out, arg))
//   segment_<r>_coo_(out, src, index)        -> ()    (min, max: arg)  out's values take part
//   gather_csr(src, indptr, dim_size), gather_csr_(out, src, indptr)
//   gather_coo(src, index), gather_coo_(out, src, index)
// segment_coo is scatter along index.dim() - 1 with a sorted index: its
// kernels are scatter's (the index plan finds the index sorted). segment_csr
// hands the caller's indptr to the plan on CUDA; elsewhere it reduces over
// each position's row. The gathers and scatter's backward share one kernel.

#include "scatter.h"

#include "scatter_kernel.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/any.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <string>

namespace torchplug {
namespace scatter_detail {
namespace {

// The reduced dim of an indptr or coo index against src: its last, with every
// leading size src's or 1. Returns dim.
int64_t check_positions(const core::OpDef& def, const char* arg, const at::Tensor& src, const at::Tensor& t) {
  const char* op = def.name().c_str();
  core::check_same_device(op, {{"src", &src}, {arg, &t}});
  def.check_dtypes({TORCHPLUG_ARG(src)});
  core::check_index_dtype(op, arg, t);
  TORCH_CHECK(t.dim() >= 1, op, ": argument '", arg, "' must have at least one dimension");
  TORCH_CHECK(t.dim() <= src.dim(), op, ": argument '", arg, "' has ", t.dim(),
              " dimensions, more than src's ", src.dim());
  const int64_t dim = t.dim() - 1;
  for (int64_t d = 0; d < dim; ++d) {
    TORCH_CHECK(t.sym_size(d) == src.sym_size(d) || t.sym_size(d) == 1, op, ": argument '", arg,
                "' of shape ", t.sym_sizes(), " does not broadcast against src of shape ",
                src.sym_sizes(), " at dimension ", d);
  }
  return dim;
}

// The size of the segments' dim: indptr.size(-1) - 1, at least 0.
c10::SymInt segment_count(const at::Tensor& indptr) {
  const auto size = indptr.sym_size(-1);
  return size > 0 ? size - 1 : c10::SymInt(0);
}

void check_out_shape(const char* op, const at::Tensor& out, const at::Tensor& src, int64_t dim,
                     const c10::SymInt& size) {
  core::check_same_device(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src)});
  core::check_same_dtype(op, TORCHPLUG_ARG(out), TORCHPLUG_ARG(src));
  auto expected = src.sym_sizes().vec();
  expected[dim] = size;
  TORCH_CHECK(out.sym_sizes() == c10::SymIntArrayRef(expected), op, ": argument 'out' of shape ",
              out.sym_sizes(), " does not match the expected ", c10::SymIntArrayRef(expected));
}

// The positions tensor (indptr or coo index) as one vector shared by every
// slice of src's leading dimensions ([size]), or undefined when slices have
// their own.
at::Tensor shared_positions(const at::Tensor& positions, const at::Tensor& src, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) {
    if (positions.size(d) != 1 && src.size(d) != 1) return at::Tensor();
  }
  return positions.reshape({positions.size(-1)}).contiguous();
}

// The gather of src along dim into `positions` positions: sizes, src, out.
GatherProblem gather_problem(const at::Tensor& src, int64_t dim, int64_t positions) {
  GatherProblem g;
  const auto split = core::split_at(src.sizes(), dim);
  g.outer = split.outer;
  g.N = split.size;
  g.inner = split.inner;
  g.E = positions;
  g.src = src.contiguous();
  g.out = at::empty(core::sizes_with(src.sizes(), dim, positions), src.options());
  return g;
}

// indptr expanded to src's leading sizes, as [outer, N + 1].
at::Tensor expand_indptr(const at::Tensor& indptr, const at::Tensor& src, int64_t dim) {
  auto sizes = src.sizes().slice(0, dim).vec();
  const int64_t outer = c10::multiply_integers(sizes);
  sizes.push_back(indptr.size(-1));
  return indptr.expand(sizes).reshape({outer, indptr.size(-1)});
}

// Every row of indptr (as given, before broadcasting) starts at 0, never
// decreases and ends within `positions`: on the CPU always, on CUDA in checked
// mode, the three facts read back together (one synchronisation).
void check_indptr(const char* op, const at::Tensor& indptr, int64_t positions) {
  if (!core::validates_indices(indptr.device()) || indptr.numel() == 0) return;
  const int64_t n = indptr.size(-1);
  const auto rows = indptr.reshape({-1, n});
  const auto facts = at::stack({rows.select(1, 0).ne(0).any().to(at::kLong),
                                at::lt(rows.narrow(1, 1, n - 1), rows.narrow(1, 0, n - 1)).any().to(at::kLong),
                                rows.select(1, n - 1).max()})
                         .cpu();
  const int64_t* fact = facts.const_data_ptr<int64_t>();
  TORCH_CHECK_INDEX(fact[0] == 0, op, ": argument 'indptr' must start at 0");
  TORCH_CHECK_INDEX(fact[1] == 0, op, ": argument 'indptr' must not decrease");
  TORCH_CHECK_INDEX(fact[2] <= positions, op, ": argument 'indptr' ends at ", fact[2],
                    ", past the ", positions, " positions of src along dim");
}

}  // namespace

void check_sorted(const char* op, const at::Tensor& index) {
  if (!core::validates_indices(index.device()) || index.size(-1) < 2) return;
  const int64_t n = index.size(-1);
  TORCH_CHECK_INDEX(!at::lt(index.narrow(-1, 1, n - 1), index.narrow(-1, 0, n - 1)).any().item<bool>(),
                    op, ": argument 'index' must be sorted along its last dimension");
}

at::Tensor rows_of_positions(const at::Tensor& expanded_indptr, int64_t E) {
  const int64_t outer = expanded_indptr.size(0);
  const int64_t N = std::max<int64_t>(expanded_indptr.size(1) - 1, 0);
  const auto ends = expanded_indptr.narrow(1, expanded_indptr.size(1) - N, N).contiguous();  // none for an empty indptr
  const auto positions = at::arange(E, expanded_indptr.options()).expand({outer, E}).contiguous();
  // The number of segment ends at or before a position: the segment holding it.
  const auto rows = at::searchsorted(ends, positions, /*out_int32=*/false, /*right=*/true);
  return outer == 1 ? rows.view({E}) : rows;
}

SegmentCsr plan_segment_csr(const core::OpDef& def, const at::Tensor& src, const at::Tensor& indptr,
                            bool with_arg) {
  const char* op = def.name().c_str();
  SegmentCsr s;
  s.dim = check_positions(def, "indptr", src, indptr);
  const auto split = core::split_at(src.sizes(), s.dim);
  s.outer = split.outer;
  s.E = split.size;
  s.inner = split.inner;
  s.N = segment_count(indptr).expect_int();
  s.src = src.contiguous();
  check_indptr(op, indptr, s.E);
  s.indptr = shared_positions(indptr, src, s.dim);
  if (!s.indptr.defined()) s.expanded_indptr = expand_indptr(indptr, src, s.dim);
  s.out = at::empty(core::sizes_with(src.sizes(), s.dim, s.N), src.options());
  if (with_arg) s.arg = at::empty(s.out.sizes(), s.out.options().dtype(at::kLong));
  return s;
}

void segment_csr_by_rows(const SegmentCsr& s, void (*kernel)(const ScatterProblem&)) {
  const bool with_arg = s.arg.defined();
  ScatterProblem p;
  p.src = s.src;
  const at::Tensor rows = rows_of_positions(s.expanded_indptr, s.E);
  p.index_1d = rows.dim() == 1;
  p.index = p.index_1d ? rows
                       : rows.view({s.outer, s.E, 1}).expand({s.outer, s.E, s.inner}).contiguous();
  p.outer = s.outer;
  p.E = s.E;
  p.inner = s.inner;
  p.N = s.N + 1;
  p.out = at::empty({s.outer, s.N + 1, s.inner}, s.out.options());
  if (with_arg) p.arg = at::empty(p.out.sizes(), s.arg.options());
  kernel(p);
  s.out.view({s.outer, s.N, s.inner}).copy_(p.out.narrow(1, 0, s.N));
  if (with_arg) s.arg.view({s.outer, s.N, s.inner}).copy_(p.arg.narrow(1, 0, s.N));
}

GatherProblem plan_gather_coo(const at::Tensor& src, const at::Tensor& index) {
  const char* op = kGatherCoo.name().c_str();
  const int64_t dim = check_positions(kGatherCoo, "index", src, index);
  GatherProblem g = gather_problem(src, dim, index.size(-1));
  g.index = shared_positions(index, src, dim);
  g.index_per_outer = !g.index.defined();
  if (g.index_per_outer) g.index = expand_indptr(index, src, dim).contiguous();
  // Checked only where a value is read: with no columns nothing is.
  if (core::validates_indices(src.device()) && g.outer * g.inner > 0) {
    core::check_index_range(op, "index", core::index_bounds(g.index), g.N);
  }
  return g;
}

GatherProblem plan_gather_csr(const at::Tensor& src, const at::Tensor& indptr,
                              std::optional<int64_t> dim_size) {
  const char* op = kGatherCsr.name().c_str();
  const int64_t dim = check_positions(kGatherCsr, "indptr", src, indptr);
  const int64_t segments = segment_count(indptr).expect_int();
  TORCH_CHECK(src.size(dim) == segments, op, ": src has ", src.size(dim), " slices along dim ", dim,
              " but indptr ", segments, " segments");
  TORCH_CHECK(!dim_size || *dim_size >= 0, op, ": argument 'dim_size' must be non-negative, got ",
              dim_size.value_or(0));
  const int64_t positions = dim_size ? *dim_size
                            : indptr.numel() == 0 ? 0
                                                  : indptr.reshape({-1}).select(0, -1).item<int64_t>();
  GatherProblem g = gather_problem(src, dim, positions);
  check_indptr(op, indptr, g.E);
  g.indptr = shared_positions(indptr, src, dim);
  // No entries, no segments: every position lies past them, as under indptr [0].
  if (g.indptr.defined() && g.indptr.numel() == 0) g.indptr = at::zeros({1}, indptr.options());
  if (!g.indptr.defined()) {
    g.index = rows_of_positions(expand_indptr(indptr, src, dim), g.E);
    g.index_per_outer = g.index.dim() == 2;
  }
  return g;
}


namespace {

// ---- Meta kernels ----------------------------------------------------------------

template <typename Policy>
Result<Policy> segment_csr_meta(const at::Tensor& src, const at::Tensor& indptr) {
  const int64_t dim = check_positions(kSegmentCsr.of<Policy>(), "indptr", src, indptr);
  auto sizes = src.sym_sizes().vec();
  sizes[dim] = segment_count(indptr);
  return meta_results<Policy>(sizes, src.options());
}

template <typename Policy>
InplaceResult<Policy> segment_csr_inplace_meta(const at::Tensor& out, const at::Tensor& src,
                                               const at::Tensor& indptr) {
  const auto& op = kSegmentCsr.of<Policy>();
  const int64_t dim = check_positions(op, "indptr", src, indptr);
  check_out_shape(op.name().c_str(), out, src, dim, segment_count(indptr));
  if constexpr (Policy::kHasArg) return at::empty_symint(out.sym_sizes(), out.options().dtype(at::kLong));
}

at::Tensor gather_csr_meta(const at::Tensor& src, const at::Tensor& indptr,
                           std::optional<c10::SymInt> dim_size) {
  const int64_t dim = check_positions(kGatherCsr, "indptr", src, indptr);
  TORCH_CHECK(dim_size.has_value(), kGatherCsr.name(),
              ": argument 'dim_size' is required on meta and fake tensors, where the output "
              "size cannot be read off indptr");
  auto sizes = src.sym_sizes().vec();
  sizes[dim] = *dim_size;
  return at::empty_symint(sizes, src.options());
}

at::Tensor gather_coo_meta(const at::Tensor& src, const at::Tensor& index) {
  const int64_t dim = check_positions(kGatherCoo, "index", src, index);
  auto sizes = src.sym_sizes().vec();
  sizes[dim] = index.sym_size(-1);
  return at::empty_symint(sizes, src.options());
}

void gather_inplace_meta(const core::OpDef& op, const char* arg, const at::Tensor& out, const at::Tensor& src,
                         const at::Tensor& positions) {
  const int64_t dim = check_positions(op, arg, src, positions);
  check_out_shape(op.name().c_str(), out, src, dim, out.sym_size(dim));
}

}  // namespace
}  // namespace scatter_detail

// ---- C++ API ---------------------------------------------------------------------

namespace {

template <typename Policy>
scatter_detail::Result<Policy> segment_csr_api(const at::Tensor& src, const at::Tensor& indptr,
                                               const std::optional<at::Tensor>& out) {
  using namespace scatter_detail;
  if (!out) return call_segment_csr<Policy>(src, indptr);
  static const auto op =
      core::find_op<InplaceResult<Policy>(const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
          kSegmentCsrInplace.of<Policy>());
  if constexpr (Policy::kHasArg) {
    return {*out, op.call(*out, src, indptr)};
  } else {
    op.call(*out, src, indptr);
    return *out;
  }
}

template <typename Policy>
scatter_detail::Result<Policy> segment_coo_api(const at::Tensor& src, const at::Tensor& index,
                                               const std::optional<at::Tensor>& out,
                                               std::optional<int64_t> dim_size) {
  using namespace scatter_detail;
  if (!out) {
    std::optional<c10::SymInt> size;
    if (dim_size) size = c10::SymInt(*dim_size);
    return call_segment_coo<Policy>(src, index, std::move(size));
  }
  const int64_t d = index.dim() - 1;
  if (dim_size && d >= 0 && out->dim() > d) {
    TORCH_CHECK(*dim_size == out->size(d), kSegmentCoo.of<Policy>().name(), ": argument 'dim_size' (",
                *dim_size, ") disagrees with out.size(", d, ") (", out->size(d), ")");
  }
  if constexpr (Policy::kHasArg) {
    return {*out, call_segment_coo_<Policy>(*out, src, index)};
  } else {
    call_segment_coo_<Policy>(*out, src, index);
    return *out;
  }
}

void call_gather_inplace(const core::OpDef& def, const at::Tensor& out, const at::Tensor& src,
                         const at::Tensor& positions) {
  core::find_op<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>(def).call(out, src, positions);
}

// The first output: the values of min and max, without their arg.
template <typename Policy>
at::Tensor values(scatter_detail::Result<Policy> result) {
  if constexpr (Policy::kHasArg) {
    return std::get<0>(result);
  } else {
    return result;
  }
}

}  // namespace

using core::MaxPolicy;
using core::MeanPolicy;
using core::MinPolicy;
using core::MulPolicy;
using core::SumPolicy;

at::Tensor segment_sum_csr(const at::Tensor& src, const at::Tensor& indptr, const std::optional<at::Tensor>& out) {
  return segment_csr_api<SumPolicy>(src, indptr, out);
}
at::Tensor segment_mean_csr(const at::Tensor& src, const at::Tensor& indptr, const std::optional<at::Tensor>& out) {
  return segment_csr_api<MeanPolicy>(src, indptr, out);
}
at::Tensor segment_mul_csr(const at::Tensor& src, const at::Tensor& indptr, const std::optional<at::Tensor>& out) {
  return segment_csr_api<MulPolicy>(src, indptr, out);
}
std::tuple<at::Tensor, at::Tensor> segment_min_csr(const at::Tensor& src, const at::Tensor& indptr,
                                                   const std::optional<at::Tensor>& out) {
  return segment_csr_api<MinPolicy>(src, indptr, out);
}
std::tuple<at::Tensor, at::Tensor> segment_max_csr(const at::Tensor& src, const at::Tensor& indptr,
                                                   const std::optional<at::Tensor>& out) {
  return segment_csr_api<MaxPolicy>(src, indptr, out);
}

at::Tensor segment_sum_coo(const at::Tensor& src, const at::Tensor& index, const std::optional<at::Tensor>& out,
                           std::optional<int64_t> dim_size) {
  return segment_coo_api<SumPolicy>(src, index, out, dim_size);
}
at::Tensor segment_mean_coo(const at::Tensor& src, const at::Tensor& index, const std::optional<at::Tensor>& out,
                            std::optional<int64_t> dim_size) {
  return segment_coo_api<MeanPolicy>(src, index, out, dim_size);
}
at::Tensor segment_mul_coo(const at::Tensor& src, const at::Tensor& index, const std::optional<at::Tensor>& out,
                           std::optional<int64_t> dim_size) {
  return segment_coo_api<MulPolicy>(src, index, out, dim_size);
}
std::tuple<at::Tensor, at::Tensor> segment_min_coo(const at::Tensor& src, const at::Tensor& index,
                                                   const std::optional<at::Tensor>& out,
                                                   std::optional<int64_t> dim_size) {
  return segment_coo_api<MinPolicy>(src, index, out, dim_size);
}
std::tuple<at::Tensor, at::Tensor> segment_max_coo(const at::Tensor& src, const at::Tensor& index,
                                                   const std::optional<at::Tensor>& out,
                                                   std::optional<int64_t> dim_size) {
  return segment_coo_api<MaxPolicy>(src, index, out, dim_size);
}

at::Tensor segment_csr(const at::Tensor& src, const at::Tensor& indptr,
                       const std::optional<at::Tensor>& out, std::string_view reduce) {
  return core::AllReductionOps::visit("torchplug::segment_csr", reduce, [&](auto policy) {
    return values<decltype(policy)>(segment_csr_api<decltype(policy)>(src, indptr, out));
  });
}

at::Tensor segment_coo(const at::Tensor& src, const at::Tensor& index,
                       const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size,
                       std::string_view reduce) {
  return core::AllReductionOps::visit("torchplug::segment_coo", reduce, [&](auto policy) {
    return values<decltype(policy)>(segment_coo_api<decltype(policy)>(src, index, out, dim_size));
  });
}

at::Tensor gather_csr(const at::Tensor& src, const at::Tensor& indptr,
                      const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size) {
  if (!out) {
    std::optional<c10::SymInt> size;
    if (dim_size) size = c10::SymInt(*dim_size);
    return scatter_detail::call_gather_csr(src, indptr, std::move(size));
  }
  const int64_t d = indptr.dim() - 1;
  if (dim_size && d >= 0 && out->dim() > d) {
    TORCH_CHECK(*dim_size == out->size(d), "torchplug::gather_csr: argument 'dim_size' (", *dim_size,
                ") disagrees with out.size(", d, ") (", out->size(d), ")");
  }
  call_gather_inplace(scatter_detail::kGatherCsrInplace, *out, src, indptr);
  return *out;
}

at::Tensor gather_coo(const at::Tensor& src, const at::Tensor& index,
                      const std::optional<at::Tensor>& out) {
  if (!out) return scatter_detail::call_gather_coo(src, index);
  call_gather_inplace(scatter_detail::kGatherCooInplace, *out, src, index);
  return *out;
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  using namespace torchplug::scatter_detail;
  for (const auto* family : {&kSegmentCsr, &kSegmentCsrInplace, &kSegmentCoo, &kSegmentCooInplace}) {
    family->define_all(m);
  }
  for (const auto* def : {&kGatherCsr, &kGatherCsrInplace, &kGatherCoo, &kGatherCooInplace}) m.define(*def);
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  using namespace torchplug::scatter_detail;
  torchplug::core::AllReductionOps::for_each([&](auto policy) {
    using Policy = decltype(policy);
    m.impl(kSegmentCsr.of<Policy>(), &segment_csr_meta<Policy>);
    m.impl(kSegmentCsrInplace.of<Policy>(), &segment_csr_inplace_meta<Policy>);
    m.impl(kSegmentCoo.of<Policy>(), [](const at::Tensor& src, const at::Tensor& index,
                                        std::optional<c10::SymInt> dim_size) {
      return meta<Policy>(kSegmentCoo.of<Policy>(), src, index, index.dim() - 1, dim_size);
    });
    m.impl(kSegmentCooInplace.of<Policy>(), [](const at::Tensor& out, const at::Tensor& src,
                                               const at::Tensor& index) {
      return meta_inplace<Policy>(kSegmentCoo.of<Policy>(), out, src, index, index.dim() - 1);
    });
  });
  m.impl(kGatherCsr, &gather_csr_meta);
  m.impl(kGatherCoo, &gather_coo_meta);
  m.impl(kGatherCsrInplace, [](const at::Tensor& out, const at::Tensor& src, const at::Tensor& indptr) {
    gather_inplace_meta(kGatherCsrInplace, "indptr", out, src, indptr);
  });
  m.impl(kGatherCooInplace, [](const at::Tensor& out, const at::Tensor& src, const at::Tensor& index) {
    gather_inplace_meta(kGatherCooInplace, "index", out, src, index);
  });
}
