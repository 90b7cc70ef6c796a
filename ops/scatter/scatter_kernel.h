#pragma once

// Internal to the scatter plugin: the problem the op entries hand their CPU and
// CUDA kernels, the ops of the family (one per reduction policy of
// core/reduction.h), and the steps around the kernels shared by both devices.

#include "torchplug/core/reduction.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/SymInt.h>

#include <initializer_list>
#include <optional>
#include <tuple>
#include <type_traits>

namespace torchplug::scatter_detail {

// "torchplug::scatter_<name>" for each reduction, from the table.
template <typename Policy>
inline constexpr const char* kOpName = nullptr;
#define TORCHPLUG_SCATTER_OP_NAME(name, Policy) \
  template <>                                   \
  inline constexpr const char* kOpName<Policy> = "torchplug::scatter_" #name;
TORCHPLUG_FOR_EACH_REDUCTION(TORCHPLUG_SCATTER_OP_NAME)
#undef TORCHPLUG_SCATTER_OP_NAME

// The dtypes of src every op of the family takes.
inline constexpr std::initializer_list<at::ScalarType> kDtypes = {
    at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kInt, at::kLong};

// What the ops return: the output, and for min and max its arg too.
template <typename Policy>
using Result = std::conditional_t<Policy::kHasArg, std::tuple<at::Tensor, at::Tensor>, at::Tensor>;
// What the in-place ops return: nothing (out is written), or the arg.
template <typename Policy>
using InplaceResult = std::conditional_t<Policy::kHasArg, at::Tensor, void>;

// The ops through the dispatcher, for the C++ API and the autograd kernels.
template <typename Policy>
Result<Policy> call_scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size);
template <typename Policy>
InplaceResult<Policy> call_scatter_(const at::Tensor& out, const at::Tensor& src,
                                    const at::Tensor& index, int64_t dim);

// src viewed as [outer, E, inner] reduced into out viewed as [outer, N, inner].
// A kernel leaves out = reduce(accumulate ? out : nothing, sources) with the
// policy's empty value in slots nothing reached, and arg (when the policy has
// one) = the smallest source position holding the slot's value, E if none.
struct ScatterProblem {
  at::Tensor src;    // contiguous
  at::Tensor index;  // contiguous int64: [E] when index_1d, else src's shape
  bool index_1d = true;
  int64_t outer = 1, E = 0, inner = 1, N = 0;
  at::Tensor out;    // contiguous, src's dtype: the result, or a stand-in for a strided out=
  at::Tensor arg;    // contiguous int64 of out's shape, for policies with an arg
  bool accumulate = false;  // out holds values that take part; else its contents are garbage
};

// Validates the arguments and broadcasts the index, with no outputs
// allocated: what the ops built on the scatter problem (the composites) share.
// On CPU (and in checked mode) also checks every index value against the output size.
ScatterProblem describe(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size);
// Validates the arguments, broadcasts the index and allocates the outputs.
// On CPU (and in checked mode) also checks every index value against the output size.
// `op` names the op in errors (segment_coo plans as scatter does).
template <typename Policy>
ScatterProblem plan(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size, const char* op = kOpName<Policy>);
template <typename Policy>
ScatterProblem plan_inplace(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                            int64_t dim, const char* op = kOpName<Policy>);
// The Meta kernels: checks and outputs of the right shape (dim_size is required).
template <typename Policy>
Result<Policy> meta(const char* op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<c10::SymInt> dim_size);
template <typename Policy>
InplaceResult<Policy> meta_inplace(const char* op, const at::Tensor& out, const at::Tensor& src,
                                   const at::Tensor& index, int64_t dim);
// Writes the result into the caller's `out` when the kernel worked on a stand-in.
void finish_inplace(const ScatterProblem& problem, const at::Tensor& out);

// What the functional op returns: out, and for min and max arg.
template <typename Policy>
Result<Policy> results(const at::Tensor& out, const at::Tensor& arg) {
  if constexpr (Policy::kHasArg) {
    return {out, arg};
  } else {
    return out;
  }
}
template <typename Policy>
Result<Policy> results(const ScatterProblem& problem) {
  return results<Policy>(problem.out, problem.arg);
}
// The arg output for out (int64, its shape), undefined without an arg.
template <typename Policy>
at::Tensor empty_arg(const at::Tensor& out) {
  return Policy::kHasArg ? at::empty(out.sizes(), out.options().dtype(at::kLong)) : at::Tensor();
}
// A Meta kernel's outputs of `sizes`.
template <typename Policy>
Result<Policy> meta_results(c10::SymIntArrayRef sizes, const at::TensorOptions& options) {
  return results<Policy>(at::empty_symint(sizes, options),
                         Policy::kHasArg ? at::empty_symint(sizes, options.dtype(at::kLong)) : at::Tensor());
}

template <typename Policy>
void scatter_kernel_cpu(const ScatterProblem& problem);
template <typename Policy>
void scatter_kernel_cuda(const ScatterProblem& problem);

// ---- segment and gather (segment.cpp) -----------------------------------------

// "torchplug::segment_<name>_csr" and "..._coo" for each reduction.
template <typename Policy>
inline constexpr const char* kSegmentCsrName = nullptr;
template <typename Policy>
inline constexpr const char* kSegmentCooName = nullptr;
#define TORCHPLUG_SEGMENT_OP_NAMES(name, Policy)                                      \
  template <>                                                                         \
  inline constexpr const char* kSegmentCsrName<Policy> = "torchplug::segment_" #name "_csr"; \
  template <>                                                                         \
  inline constexpr const char* kSegmentCooName<Policy> = "torchplug::segment_" #name "_coo";
TORCHPLUG_FOR_EACH_REDUCTION(TORCHPLUG_SEGMENT_OP_NAMES)
#undef TORCHPLUG_SEGMENT_OP_NAMES

template <typename Policy>
Result<Policy> call_segment_csr(const at::Tensor& src, const at::Tensor& indptr);
template <typename Policy>
Result<Policy> call_segment_coo(const at::Tensor& src, const at::Tensor& index,
                                std::optional<c10::SymInt> dim_size);
template <typename Policy>
InplaceResult<Policy> call_segment_coo_(const at::Tensor& out, const at::Tensor& src,
                                        const at::Tensor& index);
at::Tensor call_gather_csr(const at::Tensor& src, const at::Tensor& indptr,
                           std::optional<c10::SymInt> dim_size);
at::Tensor call_gather_coo(const at::Tensor& src, const at::Tensor& index);

// segment_csr of src by indptr ([..., N + 1], broadcast against src's leading
// dimensions; dim = indptr.dim() - 1), checked, with its outputs allocated.
// When every outer slice shares one indptr, `indptr` holds it ([N + 1]) for
// the devices' indptr kernels; otherwise `expanded_indptr` gives each
// position's row for a scatter (segment_csr_by_rows).
struct SegmentCsr {
  at::Tensor src;     // contiguous
  at::Tensor indptr;  // [N + 1], contiguous, when shared; else undefined
  at::Tensor expanded_indptr;  // [outer, N + 1] when the slices have their own; else undefined
  int64_t dim = 0, outer = 1, E = 0, inner = 1, N = 0;
  at::Tensor out, arg;  // the results (arg for min and max)
};
template <typename Policy>
SegmentCsr plan_segment_csr(const at::Tensor& src, const at::Tensor& indptr);
// The rows of positions 0 .. E - 1 by indptr [outer, N + 1] (int64): the
// segment holding each, N for one past the last segment. [E] when outer is 1.
// A binary search per position (gather_csr's kernels find rows on their own).
at::Tensor rows_of_positions(const at::Tensor& expanded_indptr, int64_t E);
// Runs segment_csr as a scatter over each position's row with a kernel of
// the device (N + 1 slots, the last for positions in no segment, cut off).
template <typename Policy>
void segment_csr_by_rows(const SegmentCsr& s, void (*kernel)(const ScatterProblem&));
// Segment_coo's index checks beyond scatter's: sorted along its last dimension
// (on the CPU always, on CUDA in checked mode).
void check_sorted(const char* op, const at::Tensor& index);

// src viewed as [outer, N, inner] read into out viewed as [outer, E, inner]:
// out[o, e] = src[o, index[e]] (an index of [E]) or src[o, index[o, e]]
// ([outer, E]); zeros where the index value lies outside [0, N). gather_csr
// with one indptr for every slice gives `indptr` instead of an index: e's row
// is the last r <= N with indptr[r] (clamped into [0, E]) <= e, none before
// indptr[0].
struct GatherProblem {
  at::Tensor src;     // contiguous
  at::Tensor index;   // contiguous int64, [E] or [outer, E]; or undefined, and
  at::Tensor indptr;  // contiguous int64 [N + 1]
  bool index_per_outer = false;
  int64_t outer = 1, N = 0, E = 0, inner = 1;
  at::Tensor out;    // contiguous, src's dtype
};
GatherProblem plan_gather_coo(const at::Tensor& src, const at::Tensor& index);
GatherProblem plan_gather_csr(const at::Tensor& src, const at::Tensor& indptr,
                              std::optional<int64_t> dim_size);
// segment_csr over the caller's indptr ([N + 1], int64 on src's device); p.index unused.
template <typename Policy>
void segment_kernel_cpu(const ScatterProblem& problem, const at::Tensor& indptr);
template <typename Policy>
void segment_csr_kernel_cuda(const ScatterProblem& problem, const at::Tensor& indptr);

}  // namespace torchplug::scatter_detail
