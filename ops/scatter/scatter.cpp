// torchplug::scatter_sum: schemas, registry entries, C++ API, input checks,
// the planning shared by the CPU and CUDA kernels, and the Meta kernels.
//
// Two ops, so that each has an honest schema for the compiler stacks:
//   scatter_sum(src, index, dim, dim_size) -> new tensor
//   scatter_sum_(out, src, index, dim)     -> out, accumulated in place

#include "scatter.h"

#include "scatter_kernel.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace torchplug {
namespace scatter_detail {
namespace {

constexpr std::initializer_list<at::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat,
                                                           at::kDouble, at::kInt, at::kLong};

// Checks shared by every kernel, Meta included; returns dim in [0, src.dim()).
int64_t check_args(const at::Tensor& src, const at::Tensor& index, int64_t dim) {
  core::check_same_device(kOp, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  core::check_dtype_in(kOp, "src", src, kDtypes);
  TORCHPLUG_CHECK_INDEX(kOp, index);
  TORCH_CHECK(src.dim() > 0, kOp, ": argument 'src' must have at least one dimension");
  return core::normalize_dim(kOp, dim, src.dim());
}

void check_out(const at::Tensor& out, const at::Tensor& src, int64_t dim) {
  core::check_same_device(kOp, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src)});
  core::check_same_dtype(kOp, TORCHPLUG_ARG(out), TORCHPLUG_ARG(src));
  bool same = out.dim() == src.dim();
  for (int64_t d = 0; same && d < src.dim(); ++d) {
    same = d == dim || out.sym_size(d) == src.sym_size(d);
  }
  TORCH_CHECK(same, kOp, ": argument 'out' of shape ", out.sym_sizes(),
              " does not match src of shape ", src.sym_sizes(), " outside dim ", dim);
}

// Fills in src, index and the sizes; `dim_size` < 0 asks for max(index) + 1.
ScatterProblem describe(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        int64_t dim_size) {
  ScatterProblem problem;
  problem.src = src.contiguous();
  const auto split = core::split_at(src.sizes(), dim);
  problem.outer = split.outer;
  problem.E = split.size;
  problem.inner = split.inner;
  // The values that land somewhere are those of the broadcast index: none when
  // src is empty (torch_scatter's rule, for the default dim_size too).
  if (src.numel() == 0) {
    core::broadcast(kOp, index, src, dim);  // for its shape checks
    problem.index = at::empty({0}, index.options());
  } else if (index.dim() == 1 && index.size(0) == problem.E) {
    // The common case (an edge list's targets) without broadcast()'s view ops,
    // about a third of a small call's host time.
    problem.index = index.contiguous();
  } else {
    const auto expanded = core::broadcast(kOp, index, src, dim);
    problem.index_1d = core::varies_only_along(expanded, dim);
    problem.index = problem.index_1d
                        ? expanded.as_strided({problem.E}, {expanded.stride(dim)}).contiguous()
                        : expanded.contiguous();
  }

  // CUDA kernels outside checked mode skip bad values instead.
  const bool validate = core::validates_indices(src.device());
  if (dim_size < 0 || validate) {
    const auto bounds = core::index_bounds(problem.index);
    if (dim_size < 0) dim_size = bounds.max + 1;
    if (validate) core::check_index_range(kOp, "index", bounds, dim_size);
  }
  problem.N = dim_size;
  return problem;
}

at::Tensor scatter_sum_meta(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  dim = check_args(src, index, dim);
  core::broadcast(kOp, index, src, dim);
  TORCH_CHECK(dim_size.has_value(), kOp,
              ": argument 'dim_size' is required on meta and fake tensors, where the output "
              "size cannot be read off the index values");
  TORCH_CHECK(*dim_size >= 0, kOp, ": argument 'dim_size' must be non-negative, got ", *dim_size);
  auto sizes = src.sym_sizes().vec();
  sizes[dim] = *dim_size;
  return at::empty_symint(sizes, src.options());
}

void scatter_sum_inplace_meta(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                              int64_t dim) {
  dim = check_args(src, index, dim);
  core::broadcast(kOp, index, src, dim);
  check_out(out, src, dim);
}

}  // namespace

ScatterProblem plan(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size) {
  dim = check_args(src, index, dim);
  TORCH_CHECK(!dim_size || *dim_size >= 0, kOp, ": argument 'dim_size' must be non-negative, got ",
              dim_size.value_or(0));
  auto problem = describe(src, index, dim, dim_size.value_or(-1));
  problem.out = at::empty(core::sizes_with(src.sizes(), dim, problem.N), src.options());
  return problem;
}

ScatterProblem plan_inplace(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                            int64_t dim) {
  dim = check_args(src, index, dim);
  check_out(out, src, dim);
  core::check_no_overlap(kOp, TORCHPLUG_ARG(out), {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  auto problem = describe(src, index, dim, out.size(dim));
  problem.out = out.contiguous();
  problem.accumulate = true;
  return problem;
}

at::Tensor call_scatter_sum(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torchplug::scatter_sum", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                         std::optional<c10::SymInt>)>();
  return op.call(src, index, dim, std::move(dim_size));
}

void call_scatter_sum_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                       int64_t dim) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torchplug::scatter_sum_", "")
          .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  op.call(out, src, index, dim);
}

void finish_inplace(const ScatterProblem& problem, const at::Tensor& out) {
  if (!problem.out.is_same(out)) out.copy_(problem.out);
}

}  // namespace scatter_detail

at::Tensor scatter_sum(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                       const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size) {
  if (!out.has_value()) {
    std::optional<c10::SymInt> size;
    if (dim_size) size = c10::SymInt(*dim_size);
    return scatter_detail::call_scatter_sum(src, index, dim, std::move(size));
  }
  const int64_t d = core::normalize_dim(scatter_detail::kOp, dim, src.dim());
  if (dim_size && out->dim() > d) {  // an out of the wrong rank is the op's to refuse
    TORCH_CHECK(*dim_size == out->size(d), scatter_detail::kOp, ": argument 'dim_size' (",
                *dim_size, ") disagrees with out.size(", d, ") (", out->size(d), ")");
  }
  scatter_detail::call_scatter_sum_(*out, src, index, dim);
  return *out;
}

}  // namespace torchplug

TORCH_LIBRARY_FRAGMENT(torchplug, m) {
  using torchplug::core::define;
  const std::vector<c10::ScalarType> dtypes(torchplug::scatter_detail::kDtypes);
  define(m, {"scatter_sum(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor",
             "scatter",
             dtypes,
             "Sums slices of src into the output slots named by index along dim."});
  define(m, {"scatter_sum_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> ()",
             "scatter",
             dtypes,
             "In-place scatter_sum: adds the sums into out."});
}

TORCH_LIBRARY_IMPL(torchplug, Meta, m) {
  m.impl("scatter_sum", &torchplug::scatter_detail::scatter_sum_meta);
  m.impl("scatter_sum_", &torchplug::scatter_detail::scatter_sum_inplace_meta);
}
