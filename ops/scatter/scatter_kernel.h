#pragma once

// Internal to the scatter plugin: the problem the op entries hand their CPU and
// CUDA kernels, the ops of the family (one per reduction policy of
// core/reduction.h), and the steps around the kernels shared by both devices.

#include "torchplug/core/reduction.h"

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

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

// Validates the arguments, broadcasts the index and allocates the outputs.
// On CPU (and in checked mode) also checks every index value against the output size.
template <typename Policy>
ScatterProblem plan(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size);
template <typename Policy>
ScatterProblem plan_inplace(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                            int64_t dim);
// Writes the result into the caller's `out` when the kernel worked on a stand-in.
void finish_inplace(const ScatterProblem& problem, const at::Tensor& out);

// What the functional op returns for a problem its kernel has run.
template <typename Policy>
Result<Policy> results(const ScatterProblem& problem) {
  if constexpr (Policy::kHasArg) {
    return {problem.out, problem.arg};
  } else {
    return problem.out;
  }
}

template <typename Policy>
void scatter_kernel_cpu(const ScatterProblem& problem);
template <typename Policy>
void scatter_kernel_cuda(const ScatterProblem& problem);

}  // namespace torchplug::scatter_detail
