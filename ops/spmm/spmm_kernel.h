#pragma once

// Internal to the spmm plugin: the problems the op entries hand the CPU and
// CUDA kernels, and its ops (spmm_schema.h) through the dispatcher.

#include "spmm_schema.h"
#include "torchplug/core/library.h"
#include "torchplug/core/reduce/policy.h"
#include "torchplug/core/reduce/problem.h"

#include <ATen/core/Tensor.h>

#include <c10/core/SymInt.h>

#include <optional>
#include <tuple>

namespace torchplug::spmm_detail {

using core::Result;

using OptTensor = std::optional<at::Tensor>;

// x viewed as [N, H, C] (F = H * C) gathered by a CSR of M rows into out
// viewed as [M, H, C], edge k's messages to head h weighed by value[k, h].
// A scalar weight per edge is H = 1.
struct SpmmProblem {
  at::Tensor rowptr;  // contiguous int64 [M + 1]
  at::Tensor col;     // contiguous int64 [nnz]
  at::Tensor value;   // contiguous, x's dtype, [nnz, H]; undefined: weights of 1
  at::Tensor x;       // contiguous
  int64_t M = 0, N = 0, nnz = 0, F = 1, H = 1, C = 1;
  at::Tensor out, arg;  // [M, *]; arg (min, max) int64 of out's shape
};

// Checks the arguments (on the CPU and in checked mode rowptr's and col's
// values, and those of a transpose given, too) and allocates the outputs.
// The transpose (colptr, row, perm) is checked only: the forward kernels do
// not read it.
template <typename Policy>
SpmmProblem plan(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value, const at::Tensor& x,
                 const OptTensor& colptr, const OptTensor& row, const OptTensor& perm);
// The Meta kernels: checks and outputs of the right shape.
template <typename Policy>
Result<Policy> meta(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value, const at::Tensor& x,
                    const OptTensor& colptr, const OptTensor& row, const OptTensor& perm);
// The ops through the dispatcher.
template <typename Policy>
Result<Policy> call_spmm(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                         const at::Tensor& x, const OptTensor& colptr = std::nullopt,
                         const OptTensor& row = std::nullopt, const OptTensor& perm = std::nullopt) {
  static const auto op =
      core::find_op<Result<Policy>(const at::Tensor&, const at::Tensor&, const OptTensor&, const at::Tensor&,
                                   const OptTensor&, const OptTensor&, const OptTensor&)>(kSpmm.of<Policy>());
  return op.call(rowptr, col, value, x, colptr, row, perm);
}

template <typename Policy>
void spmm_kernel_cpu(const SpmmProblem& p);
template <typename Policy>
void spmm_kernel_cuda(const SpmmProblem& p);

// spmm_transpose's problem: the CSR (rowptr, col) of M rows and N columns,
// and its outputs.
struct TransposeProblem {
  at::Tensor rowptr, col;  // contiguous int64
  int64_t M = 0, N = 0, nnz = 0;
  at::Tensor colptr, row, perm;  // [N + 1], [nnz], [nnz]
};
TransposeProblem plan_transpose(const at::Tensor& rowptr, const at::Tensor& col, int64_t num_cols);
std::tuple<at::Tensor, at::Tensor, at::Tensor> meta_transpose(const at::Tensor& rowptr, const at::Tensor& col,
                                                              c10::SymInt num_cols);
std::tuple<at::Tensor, at::Tensor, at::Tensor> call_transpose(const at::Tensor& rowptr, const at::Tensor& col,
                                                              c10::SymInt num_cols);
void transpose_kernel_cpu(const TransposeProblem& p);
void transpose_kernel_cuda(const TransposeProblem& p);

// sddmm's problem: a [M, H, C] and b [N, H, C] (F = H * C) over the CSR's
// edges into out [nnz, H], one dot product per edge and head.
struct SddmmProblem {
  at::Tensor rowptr, col;  // contiguous int64
  at::Tensor a, b;         // contiguous, one dtype
  int64_t M = 0, N = 0, nnz = 0, F = 1, H = 1, C = 1;
  bool mean = false;
  at::Tensor out;  // [nnz] (heads == 1) or [nnz, H], a's dtype
};
SddmmProblem plan_sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                        bool mean, const OptTensor& colptr, const OptTensor& row, const OptTensor& perm,
                        int64_t heads);
at::Tensor meta_sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                      bool mean, const OptTensor& colptr, const OptTensor& row, const OptTensor& perm,
                      int64_t heads);
at::Tensor call_sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                      bool mean, const OptTensor& colptr = std::nullopt, const OptTensor& row = std::nullopt,
                      const OptTensor& perm = std::nullopt, int64_t heads = 1);
void sddmm_kernel_cpu(const SddmmProblem& p);
void sddmm_kernel_cuda(const SddmmProblem& p);

}  // namespace torchplug::spmm_detail
