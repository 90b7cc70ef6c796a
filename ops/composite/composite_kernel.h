#pragma once

// Internal to the composite plugin: the problem its op entries hand the CPU
// and CUDA kernels, and the entries themselves, written once for both devices.
//
// Every composite is a row program (core/reduce/row_program.h) over the
// reduction layer's problem (core/reduce/problem.h): src viewed as [outer, E,
// inner], each source landing in row index[e] of N. Two kinds:
//   reducing (logsumexp, std):  out [outer, N, inner] = program.result(row state)
//   emitting (softmax, log_softmax, their backward): out of src's shape,
//     out[o, e, f] = program.emit(state of e's row, x[o, e, f], y[o, e, f])
// The kernels run a program given its one option (log, into_out, unbiased).

#include "composite_schema.h"
#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/reduce/row_program.h"
#include "torchplug/core/registry.h"

#include <ATen/core/Tensor.h>

#include <initializer_list>
#include <optional>

namespace torchplug::composite_detail {

using core::ScatterProblem;

// A program's problem: the scatter problem of x (p.src), its result in p.out
// (reducing: out's values taking part when p.accumulate), and for two-input
// programs y, contiguous in x's layout.
struct RowsProblem {
  ScatterProblem p;
  at::Tensor y;
};

// Checks the arguments (on the CPU and in checked mode the index values too)
// and allocates the output: of src's shape (emitting programs), of the
// reduced shape (reducing ones), or out itself (reducing into it). Errors
// name `op`.
RowsProblem plan_emit(const core::OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                      std::optional<int64_t> dim_size);
RowsProblem plan_softmax_csr(const core::OpDef& op, const at::Tensor& src, const at::Tensor& indptr, int64_t dim);
RowsProblem plan_backward(const core::OpDef& op, const at::Tensor& grad, const at::Tensor& out,
                          const at::Tensor& index, int64_t dim, std::optional<int64_t> dim_size);
RowsProblem plan_reduce(const core::OpDef& op, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size);
RowsProblem plan_reduce_into(const core::OpDef& op, const at::Tensor& out, const at::Tensor& src,
                             const at::Tensor& index, int64_t dim);
// The group of each position 0 .. E - 1 by a 1-D indptr (N past the last).
at::Tensor csr_rows(const at::Tensor& indptr, int64_t E);

// The ops through the dispatcher, for the C++ API and the autograd kernels.
at::Tensor call_softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size, bool log);
at::Tensor call_logsumexp(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                          std::optional<c10::SymInt> dim_size);
void call_logsumexp_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index, int64_t dim);
at::Tensor call_std(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                    std::optional<c10::SymInt> dim_size, bool unbiased);
at::Tensor call_softmax_backward(const at::Tensor& grad, const at::Tensor& out, const at::Tensor& index,
                                 int64_t dim, std::optional<int64_t> dim_size, bool log);

// Runs Program<math type>{option} over r on the CPU or CUDA.
template <template <typename> class Program>
void run_cpu(const RowsProblem& r, bool option);
template <template <typename> class Program>
void run_cuda(const RowsProblem& r, bool option);

}  // namespace torchplug::composite_detail
