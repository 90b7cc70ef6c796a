// The scatter family: schemas, registry entries, C++ API, input checks, the
// planning shared by the CPU and CUDA kernels, and the Meta kernels. One op per
// reduction of core/reduction.h's table, each in two forms with honest schemas
// for the compiler stacks:
//   scatter_<r>(src, index, dim, dim_size) -> out          (min, max: (out, arg))
//   scatter_<r>_(out, src, index, dim)     -> ()           (min, max: arg)
// the second reducing into out in place, out's values taking part.

#include "scatter.h"

#include "scatter_kernel.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>

#include <string>

namespace torchplug {
namespace scatter_detail {
namespace {

// Checks shared by every kernel, Meta included; returns dim in [0, src.dim()).
int64_t check_args(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim) {
  core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  core::check_dtype_in(op, "src", src, kDtypes);
  TORCHPLUG_CHECK_INDEX(op, index);
  TORCH_CHECK(src.dim() > 0, op, ": argument 'src' must have at least one dimension");
  return core::normalize_dim(op, dim, src.dim());
}

void check_out(const char* op, const at::Tensor& out, const at::Tensor& src, int64_t dim) {
  core::check_same_device(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src)});
  core::check_same_dtype(op, TORCHPLUG_ARG(out), TORCHPLUG_ARG(src));
  bool same = out.dim() == src.dim();
  for (int64_t d = 0; same && d < src.dim(); ++d) {
    same = d == dim || out.sym_size(d) == src.sym_size(d);
  }
  TORCH_CHECK(same, op, ": argument 'out' of shape ", out.sym_sizes(),
              " does not match src of shape ", src.sym_sizes(), " outside dim ", dim);
}

// Fills in src, index and the sizes; `dim_size` < 0 asks for max(index) + 1.
ScatterProblem describe_sizes(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
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
    core::broadcast(op, index, src, dim);  // for its shape checks
    problem.index = at::empty({0}, index.options());
  } else if (index.dim() == 1 && index.size(0) == problem.E) {
    // The common case (an edge list's targets) without broadcast()'s view ops,
    // about a third of a small call's host time.
    problem.index = index.contiguous();
  } else {
    const auto expanded = core::broadcast(op, index, src, dim);
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
    if (validate) core::check_index_range(op, "index", bounds, dim_size);
  }
  problem.N = dim_size;
  return problem;
}

template <typename Policy>
c10::OperatorHandle find_op(bool inplace) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(
      (std::string(kOpName<Policy>) + (inplace ? "_" : "")).c_str(), "");
}

}  // namespace

ScatterProblem describe(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size) {
  dim = check_args(op, src, index, dim);
  TORCH_CHECK(!dim_size || *dim_size >= 0, op, ": argument 'dim_size' must be non-negative, got ",
              dim_size.value_or(0));
  return describe_sizes(op, src, index, dim, dim_size.value_or(-1));
}

template <typename Policy>
Result<Policy> meta(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<c10::SymInt> dim_size) {
  dim = check_args(op, src, index, dim);
  core::broadcast(op, index, src, dim);
  TORCH_CHECK(dim_size.has_value(), op,
              ": argument 'dim_size' is required on meta and fake tensors, where the output "
              "size cannot be read off the index values");
  TORCH_CHECK(*dim_size >= 0, op, ": argument 'dim_size' must be non-negative, got ", *dim_size);
  auto sizes = src.sym_sizes().vec();
  sizes[dim] = *dim_size;
  return meta_results<Policy>(sizes, src.options());
}

template <typename Policy>
InplaceResult<Policy> meta_inplace(const char* op, const at::Tensor& out, const at::Tensor& src,
                                   const at::Tensor& index, int64_t dim) {
  dim = check_args(op, src, index, dim);
  core::broadcast(op, index, src, dim);
  check_out(op, out, src, dim);
  if constexpr (Policy::kHasArg) return at::empty_symint(out.sym_sizes(), out.options().dtype(at::kLong));
}

template <typename Policy>
ScatterProblem plan(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size, const char* op) {
  auto problem = describe(op, src, index, dim, dim_size);
  const int64_t d = core::normalize_dim(op, dim, src.dim());
  problem.out = at::empty(core::sizes_with(src.sizes(), d, problem.N), src.options());
  problem.arg = empty_arg<Policy>(problem.out);
  return problem;
}

template <typename Policy>
ScatterProblem plan_inplace(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                            int64_t dim, const char* op) {
  dim = check_args(op, src, index, dim);
  check_out(op, out, src, dim);
  core::check_no_overlap(op, TORCHPLUG_ARG(out), {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  auto problem = describe_sizes(op, src, index, dim, out.size(dim));
  problem.out = out.contiguous();
  problem.arg = empty_arg<Policy>(problem.out);
  problem.accumulate = true;
  return problem;
}

template <typename Policy>
Result<Policy> call_scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  static auto op = find_op<Policy>(false)
                       .template typed<Result<Policy>(const at::Tensor&, const at::Tensor&, int64_t,
                                                      std::optional<c10::SymInt>)>();
  return op.call(src, index, dim, std::move(dim_size));
}

template <typename Policy>
InplaceResult<Policy> call_scatter_(const at::Tensor& out, const at::Tensor& src,
                                    const at::Tensor& index, int64_t dim) {
  static auto op = find_op<Policy>(true)
                       .template typed<InplaceResult<Policy>(const at::Tensor&, const at::Tensor&,
                                                             const at::Tensor&, int64_t)>();
  return op.call(out, src, index, dim);
}

void finish_inplace(const ScatterProblem& problem, const at::Tensor& out) {
  if (!problem.out.is_same(out)) out.copy_(problem.out);
}

#define TORCHPLUG_INSTANTIATE(name, Policy)                                                         \
  template ScatterProblem plan<Policy>(const at::Tensor&, const at::Tensor&, int64_t,               \
                                       std::optional<int64_t>, const char*);                        \
  template ScatterProblem plan_inplace<Policy>(const at::Tensor&, const at::Tensor&,                \
                                               const at::Tensor&, int64_t, const char*);            \
  template Result<Policy> call_scatter<Policy>(const at::Tensor&, const at::Tensor&, int64_t,       \
                                               std::optional<c10::SymInt>);                         \
  template InplaceResult<Policy> call_scatter_<Policy>(const at::Tensor&, const at::Tensor&,        \
                                                       const at::Tensor&, int64_t);                 \
  template Result<Policy> meta<Policy>(const char*, const at::Tensor&, const at::Tensor&, int64_t,  \
                                       std::optional<c10::SymInt>);                                 \
  template InplaceResult<Policy> meta_inplace<Policy>(const char*, const at::Tensor&,               \
                                                      const at::Tensor&, const at::Tensor&, int64_t);
TORCHPLUG_FOR_EACH_REDUCTION(TORCHPLUG_INSTANTIATE)
#undef TORCHPLUG_INSTANTIATE

}  // namespace scatter_detail

namespace {

// The C++ API's shared part: out= goes to the in-place op, after checking that
// dim_size agrees with it.
template <typename Policy>
scatter_detail::Result<Policy> scatter_api(const at::Tensor& src, const at::Tensor& index,
                                           int64_t dim, const std::optional<at::Tensor>& out,
                                           std::optional<int64_t> dim_size) {
  using namespace scatter_detail;
  if (!out.has_value()) {
    std::optional<c10::SymInt> size;
    if (dim_size) size = c10::SymInt(*dim_size);
    return call_scatter<Policy>(src, index, dim, std::move(size));
  }
  const int64_t d = core::normalize_dim(kOpName<Policy>, dim, src.dim());
  if (dim_size && out->dim() > d) {  // an out of the wrong rank is the op's to refuse
    TORCH_CHECK(*dim_size == out->size(d), kOpName<Policy>, ": argument 'dim_size' (", *dim_size,
                ") disagrees with out.size(", d, ") (", out->size(d), ")");
  }
  if constexpr (Policy::kHasArg) {
    auto arg = call_scatter_<Policy>(*out, src, index, dim);
    return {*out, arg};
  } else {
    call_scatter_<Policy>(*out, src, index, dim);
    return *out;
  }
}

}  // namespace

#define TORCHPLUG_SCATTER_API(name, Policy)                                                        \
  scatter_detail::Result<Policy> scatter_##name(const at::Tensor& src, const at::Tensor& index,    \
                                                int64_t dim, const std::optional<at::Tensor>& out, \
                                                std::optional<int64_t> dim_size) {                 \
    return scatter_api<Policy>(src, index, dim, out, dim_size);                                    \
  }
TORCHPLUG_FOR_EACH_REDUCTION(TORCHPLUG_SCATTER_API)
#undef TORCHPLUG_SCATTER_API

at::Tensor scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                   const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size,
                   std::string_view reduce) {
  if (reduce == "sum" || reduce == "add") return scatter_sum(src, index, dim, out, dim_size);
  if (reduce == "mean") return scatter_mean(src, index, dim, out, dim_size);
  if (reduce == "mul") return scatter_mul(src, index, dim, out, dim_size);
  if (reduce == "min") return std::get<0>(scatter_min(src, index, dim, out, dim_size));
  if (reduce == "max") return std::get<0>(scatter_max(src, index, dim, out, dim_size));
  TORCH_CHECK_VALUE(false, "torchplug::scatter: argument 'reduce' must be one of 'sum', 'add', "
                    "'mean', 'mul', 'min', 'max', got '", reduce, "'");
}

}  // namespace torchplug

namespace {

// Schema and registry entry of both forms of one reduction.
template <typename Policy>
void define_reduction(torchplug::core::Library& m, const std::string& name, const std::string& doc) {
  const std::vector<c10::ScalarType> dtypes(torchplug::scatter_detail::kDtypes);
  const std::string op = "scatter_" + name;
  const std::string returns = Policy::kHasArg ? "(Tensor, Tensor)" : "Tensor";
  m.define({op + "(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> " + returns, dtypes, doc});
  m.define({op + "_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> " +
                (Policy::kHasArg ? "Tensor" : "()"),
            dtypes, "In-place " + op + ": reduces into out, whose values take part."});
}

const char* reduction_doc(torchplug::core::Reduce reduce) {
  using torchplug::core::Reduce;
  switch (reduce) {
    case Reduce::kSum: return "Sums slices of src into the output slots named by index along dim.";
    case Reduce::kMean: return "Averages slices of src into the output slots named by index along dim.";
    case Reduce::kMul: return "Multiplies slices of src into the output slots named by index along dim.";
    case Reduce::kMin: return "Minimum of the slices of src in each output slot, with its position (arg).";
    case Reduce::kMax: return "Maximum of the slices of src in each output slot, with its position (arg).";
  }
  return "";
}

}  // namespace

TORCHPLUG_LIBRARY(torchplug, m) {
#define TORCHPLUG_DEFINE(name, Policy) define_reduction<Policy>(m, #name, reduction_doc(Policy::kReduce));
  TORCHPLUG_FOR_EACH_REDUCTION(TORCHPLUG_DEFINE)
#undef TORCHPLUG_DEFINE
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  using namespace torchplug::scatter_detail;
#define TORCHPLUG_META(name, Policy)                              \
  m.impl("scatter_" #name, [](const at::Tensor& src, const at::Tensor& index, int64_t dim,      \
                              std::optional<c10::SymInt> dim_size) {                             \
    return meta<Policy>(kOpName<Policy>, src, index, dim, std::move(dim_size));                  \
  });                                                                                             \
  m.impl("scatter_" #name "_", [](const at::Tensor& out, const at::Tensor& src,                  \
                                  const at::Tensor& index, int64_t dim) {                        \
    return meta_inplace<Policy>(kOpName<Policy>, out, src, index, dim);                           \
  });
  TORCHPLUG_FOR_EACH_REDUCTION(TORCHPLUG_META)
#undef TORCHPLUG_META
}
