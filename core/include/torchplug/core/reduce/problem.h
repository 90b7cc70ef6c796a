#pragma once

// The problem every reduction-shaped op hands its kernels: values of src
// reduced into the slots of out named by an index, on the CPU or CUDA, under
// one of the policies of policy.h. An op plans it (checks, broadcast index,
// output sizes, outputs), runs the strategies of cpu_schedules.h or
// cuda/strategy.cuh, and returns results():
//
//   auto p = core::plan<Policy>(kOp, src, index, dim, dim_size);  // kOp: the op's OpDef
//   core::scatter_kernel_cpu<Policy>(p);
//   return core::results<Policy>(p);
//
// Errors name the OpDef's op; src's dtypes are its dtypes.

#include "torchplug/core/registry.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/SymInt.h>

#include <optional>
#include <tuple>
#include <type_traits>

namespace torchplug::core {

// What a reduction op returns: the output, and for policies with an arg
// (min, max) the arg too.
template <typename Policy>
using Result = std::conditional_t<Policy::kHasArg, std::tuple<at::Tensor, at::Tensor>, at::Tensor>;
// What the in-place form returns: nothing (out is written), or the arg.
template <typename Policy>
using InplaceResult = std::conditional_t<Policy::kHasArg, at::Tensor, void>;

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
// allocated (the composites allocate their own). On the CPU (and in checked
// mode) also checks every index value against the output size; a dim_size
// left out is max(index) + 1.
ScatterProblem describe(const OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size);
// describe(), then the outputs: out of src's dtype, and arg when `with_arg`.
ScatterProblem plan(const OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size, bool with_arg);
// For reducing into `out` in place, its values taking part.
ScatterProblem plan_inplace(const OpDef& op, const at::Tensor& out, const at::Tensor& src,
                            const at::Tensor& index, int64_t dim, bool with_arg);
// The Meta kernels' checks; returns the output's sizes (dim_size is required
// there: the values of the index cannot be read).
std::vector<c10::SymInt> meta_sizes(const OpDef& op, const at::Tensor& src, const at::Tensor& index,
                                    int64_t dim, const std::optional<c10::SymInt>& dim_size);
void meta_check_inplace(const OpDef& op, const at::Tensor& out, const at::Tensor& src,
                        const at::Tensor& index, int64_t dim);
// Writes the result into the caller's `out` when the kernel worked on a stand-in.
void finish_inplace(const ScatterProblem& problem, const at::Tensor& out);

template <typename Policy>
ScatterProblem plan(const OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size) {
  return plan(op, src, index, dim, dim_size, Policy::kHasArg);
}
template <typename Policy>
ScatterProblem plan_inplace(const OpDef& op, const at::Tensor& out, const at::Tensor& src,
                            const at::Tensor& index, int64_t dim) {
  return plan_inplace(op, out, src, index, dim, Policy::kHasArg);
}

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
Result<Policy> meta(const OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    const std::optional<c10::SymInt>& dim_size) {
  return meta_results<Policy>(meta_sizes(op, src, index, dim, dim_size), src.options());
}
template <typename Policy>
InplaceResult<Policy> meta_inplace(const OpDef& op, const at::Tensor& out, const at::Tensor& src,
                                   const at::Tensor& index, int64_t dim) {
  meta_check_inplace(op, out, src, index, dim);
  if constexpr (Policy::kHasArg) return at::empty_symint(out.sym_sizes(), out.options().dtype(at::kLong));
}

// The strategies' entries (cpu_schedules.h, cuda/strategy.cuh), templates a
// family instantiates for each of its policies: the reduction of `problem`,
// and a segment reduction over a caller's indptr ([N + 1], int64 on src's
// device; problem.index unused).
template <typename Policy>
void scatter_kernel_cpu(const ScatterProblem& problem);
template <typename Policy>
void segment_kernel_cpu(const ScatterProblem& problem, const at::Tensor& indptr);
template <typename Policy>
void scatter_kernel_cuda(const ScatterProblem& problem);
template <typename Policy>
void segment_csr_kernel_cuda(const ScatterProblem& problem, const at::Tensor& indptr);

}  // namespace torchplug::core
