#pragma once

// Internal to the scatter plugin: the problem the op entry hands its CPU and
// CUDA kernels, and the steps around them shared by both devices.

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <optional>

namespace torchplug::scatter_detail {

inline constexpr const char* kOp = "torchplug::scatter_sum";

// The two ops through the dispatcher, for the C++ API and the autograd kernels.
at::Tensor call_scatter_sum(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size);
void call_scatter_sum_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                       int64_t dim);

// src viewed as [outer, E, inner] summed into out viewed as [outer, N, inner].
// A kernel leaves out = (accumulate ? out : 0) + scatter_sum(src).
struct ScatterProblem {
  at::Tensor src;    // contiguous
  at::Tensor index;  // contiguous int64: [E] when index_1d, else src's shape
  bool index_1d = true;
  int64_t outer = 1, E = 0, inner = 1, N = 0;
  at::Tensor out;    // contiguous, src's dtype: the result, or a stand-in for a strided out=
  bool accumulate = false;  // out holds values to add to; else its contents are garbage
};

// Validates the arguments, broadcasts the index and allocates the output.
// On CPU also checks every index value against the output size.
ScatterProblem plan(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size);
ScatterProblem plan_inplace(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                            int64_t dim);
// Writes the result into the caller's `out` when the kernel worked on a stand-in.
void finish_inplace(const ScatterProblem& problem, const at::Tensor& out);

void scatter_sum_kernel_cpu(const ScatterProblem& problem);
void scatter_sum_kernel_cuda(const ScatterProblem& problem);

}  // namespace torchplug::scatter_detail
