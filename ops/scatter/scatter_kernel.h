#pragma once

// Internal to the scatter plugin: the problem the op entry hands its CPU and
// CUDA kernels, and the steps around them shared by both devices.

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace torchplug::scatter_detail {

inline constexpr const char* kOp = "torchplug::scatter_sum";

// src viewed as [outer, E, inner] summed into acc viewed as [outer, N, inner].
struct ScatterProblem {
  at::Tensor src;    // contiguous
  at::Tensor index;  // contiguous int64: [E] when index_1d, else src's shape
  bool index_1d = true;
  int64_t outer = 1, E = 0, inner = 1, N = 0;
  // Contiguous accumulator in src's math dtype (float for float16/bfloat16):
  // either the output itself or a zeroed temporary that finish_*() folds in.
  at::Tensor acc;
  std::vector<int64_t> out_sizes;
};

// Validates the arguments, broadcasts the index and allocates the accumulator.
// On CPU also checks every index value against the output size.
ScatterProblem plan(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<int64_t> dim_size);
ScatterProblem plan_inplace(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                            int64_t dim);

// The result of scatter_sum, from a problem planned by plan().
at::Tensor finish(const ScatterProblem& problem);
// Folds the accumulator into `out`, when it is not `out` already.
void finish_inplace(const ScatterProblem& problem, const at::Tensor& out);

void scatter_sum_kernel_cpu(const ScatterProblem& problem);
void scatter_sum_kernel_cuda(const ScatterProblem& problem);

}  // namespace torchplug::scatter_detail
