#pragma once

// Internal to the spmm plugin: the problem the op entries hand the CPU and
// CUDA kernels, the ops of the family (one per reduction policy of
// core/reduction.h), and the entries, written once for both devices.

#include "../scatter/scatter_kernel.h"
#include "torchplug/core/reduction.h"

#include <ATen/core/Tensor.h>

#include <optional>

// The reductions spmm takes: _(name, policy).
#define TORCHPLUG_FOR_EACH_SPMM_REDUCTION(_) \
  _(sum, ::torchplug::core::SumPolicy)        \
  _(mean, ::torchplug::core::MeanPolicy)      \
  _(min, ::torchplug::core::MinPolicy)        \
  _(max, ::torchplug::core::MaxPolicy)

namespace torchplug::spmm_detail {

using scatter_detail::Result;

template <typename Policy>
inline constexpr const char* kOpName = nullptr;
#define TORCHPLUG_SPMM_OP_NAME(name, Policy) \
  template <>                                \
  inline constexpr const char* kOpName<Policy> = "torchplug::spmm_" #name;
TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_SPMM_OP_NAME)
#undef TORCHPLUG_SPMM_OP_NAME

// x viewed as [N, F] gathered by a CSR of M rows into out viewed as [M, F].
struct SpmmProblem {
  at::Tensor rowptr;  // contiguous int64 [M + 1]
  at::Tensor col;     // contiguous int64 [nnz]
  at::Tensor value;   // contiguous, x's dtype, [nnz]; undefined: weights of 1
  at::Tensor x;       // contiguous
  int64_t M = 0, N = 0, nnz = 0, F = 1;
  at::Tensor out, arg;  // [M, *]; arg (min, max) int64 of out's shape
};

// Checks the arguments (on the CPU and in checked mode rowptr's and col's
// values too) and allocates the outputs.
template <typename Policy>
SpmmProblem plan(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                 const at::Tensor& x);
// The Meta kernels: checks and outputs of the right shape.
template <typename Policy>
Result<Policy> meta(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                    const at::Tensor& x);
// The ops through the dispatcher.
template <typename Policy>
Result<Policy> call_spmm(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                         const at::Tensor& x);

template <typename Policy>
void spmm_kernel_cpu(const SpmmProblem& p);
template <typename Policy>
void spmm_kernel_cuda(const SpmmProblem& p);

}  // namespace torchplug::spmm_detail
