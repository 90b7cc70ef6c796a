#include "torchplug/core/reduce/problem.h"

#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"

namespace torchplug::core {
namespace {

// Checks shared by every kernel, Meta included; returns dim in [0, src.dim()).
int64_t check_args(const OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim) {
  const char* name = op.name().c_str();
  check_same_device(name, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  op.check_dtypes({TORCHPLUG_ARG(src)});
  TORCHPLUG_CHECK_INDEX(name, index);
  TORCH_CHECK(src.dim() > 0, name, ": argument 'src' must have at least one dimension");
  return normalize_dim(name, dim, src.dim());
}

void check_out(const char* op, const at::Tensor& out, const at::Tensor& src, int64_t dim) {
  check_same_device(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src)});
  check_same_dtype(op, TORCHPLUG_ARG(out), TORCHPLUG_ARG(src));
  bool same = out.dim() == src.dim();
  for (int64_t d = 0; same && d < src.dim(); ++d) {
    same = d == dim || out.sym_size(d) == src.sym_size(d);
  }
  TORCH_CHECK(same, op, ": argument 'out' of shape ", out.sym_sizes(), " does not match src of shape ",
              src.sym_sizes(), " outside dim ", dim);
}

// Fills in src, index and the sizes; `dim_size` < 0 asks for max(index) + 1.
ScatterProblem describe_sizes(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                              int64_t dim_size) {
  ScatterProblem problem;
  problem.src = src.contiguous();
  const auto split = split_at(src.sizes(), dim);
  problem.outer = split.outer;
  problem.E = split.size;
  problem.inner = split.inner;
  // The values that land somewhere are those of the broadcast index: none when
  // src is empty (torch_scatter's rule, for the default dim_size too).
  if (src.numel() == 0) {
    broadcast(op, index, src, dim);  // for its shape checks
    problem.index = at::empty({0}, index.options());
  } else if (index.dim() == 1 && index.size(0) == problem.E) {
    // The common case (an edge list's targets) without broadcast()'s view ops,
    // about a third of a small call's host time.
    problem.index = index.contiguous();
  } else {
    const auto expanded = broadcast(op, index, src, dim);
    problem.index_1d = varies_only_along(expanded, dim);
    problem.index = problem.index_1d ? expanded.as_strided({problem.E}, {expanded.stride(dim)}).contiguous()
                                     : expanded.contiguous();
  }

  // CUDA kernels outside checked mode skip bad values instead.
  const bool validate = validates_indices(src.device());
  if (dim_size < 0 || validate) {
    const auto bounds = index_bounds(problem.index);
    if (dim_size < 0) dim_size = bounds.max + 1;
    if (validate) check_index_range(op, "index", bounds, dim_size);
  }
  problem.N = dim_size;
  return problem;
}

at::Tensor empty_arg_if(bool with_arg, const at::Tensor& out) {
  return with_arg ? at::empty(out.sizes(), out.options().dtype(at::kLong)) : at::Tensor();
}

}  // namespace

ScatterProblem describe(const OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size) {
  dim = check_args(op, src, index, dim);
  TORCH_CHECK(!dim_size || *dim_size >= 0, op.name(), ": argument 'dim_size' must be non-negative, got ",
              dim_size.value_or(0));
  return describe_sizes(op.name().c_str(), src, index, dim, dim_size.value_or(-1));
}

ScatterProblem plan(const OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size, bool with_arg) {
  auto problem = describe(op, src, index, dim, dim_size);
  const int64_t d = normalize_dim(op.name().c_str(), dim, src.dim());
  problem.out = at::empty(sizes_with(src.sizes(), d, problem.N), src.options());
  problem.arg = empty_arg_if(with_arg, problem.out);
  return problem;
}

ScatterProblem plan_inplace(const OpDef& op, const at::Tensor& out, const at::Tensor& src,
                            const at::Tensor& index, int64_t dim, bool with_arg) {
  const char* name = op.name().c_str();
  dim = check_args(op, src, index, dim);
  check_out(name, out, src, dim);
  check_no_overlap(name, TORCHPLUG_ARG(out), {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
  auto problem = describe_sizes(name, src, index, dim, out.size(dim));
  problem.out = out.contiguous();
  problem.arg = empty_arg_if(with_arg, problem.out);
  problem.accumulate = true;
  return problem;
}

std::vector<c10::SymInt> meta_sizes(const OpDef& op, const at::Tensor& src, const at::Tensor& index,
                                    int64_t dim, const std::optional<c10::SymInt>& dim_size) {
  const char* name = op.name().c_str();
  dim = check_args(op, src, index, dim);
  broadcast(name, index, src, dim);
  TORCH_CHECK(dim_size.has_value(), name,
              ": argument 'dim_size' is required on meta and fake tensors, where the output "
              "size cannot be read off the index values");
  TORCH_CHECK(*dim_size >= 0, name, ": argument 'dim_size' must be non-negative, got ", *dim_size);
  auto sizes = src.sym_sizes().vec();
  sizes[dim] = *dim_size;
  return sizes;
}

void meta_check_inplace(const OpDef& op, const at::Tensor& out, const at::Tensor& src,
                        const at::Tensor& index, int64_t dim) {
  dim = check_args(op, src, index, dim);
  broadcast(op.name().c_str(), index, src, dim);
  check_out(op.name().c_str(), out, src, dim);
}

void finish_inplace(const ScatterProblem& problem, const at::Tensor& out) {
  if (!problem.out.is_same(out)) out.copy_(problem.out);
}

}  // namespace torchplug::core
