#pragma once

// Internal to the scatter plugin: its ops (scatter_schema.h) through the
// dispatcher, and the planning of segment and gather around the kernels
// of the core reduction layer (core/reduce/), shared by both devices.

#include "scatter_schema.h"
#include "torchplug/core/library.h"
#include "torchplug/core/reduce/policy.h"
#include "torchplug/core/reduce/problem.h"

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <optional>

namespace torchplug::scatter_detail {

using core::InplaceResult;
using core::Result;
using core::ScatterProblem;
using core::empty_arg;
using core::finish_inplace;
using core::meta;
using core::meta_inplace;
using core::meta_results;
using core::results;

// The ops through the dispatcher, for the C++ API and the autograd kernels.
template <typename Policy>
Result<Policy> call_scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<c10::SymInt> dim_size) {
  static const auto op = core::find_op<Result<Policy>(const at::Tensor&, const at::Tensor&, int64_t,
                                                      std::optional<c10::SymInt>)>(kScatter.of<Policy>());
  return op.call(src, index, dim, std::move(dim_size));
}
template <typename Policy>
InplaceResult<Policy> call_scatter_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index,
                                    int64_t dim) {
  static const auto op = core::find_op<InplaceResult<Policy>(const at::Tensor&, const at::Tensor&,
                                                             const at::Tensor&, int64_t)>(kScatterInplace.of<Policy>());
  return op.call(out, src, index, dim);
}

// ---- segment and gather (segment.cpp) -----------------------------------------

template <typename Policy>
Result<Policy> call_segment_csr(const at::Tensor& src, const at::Tensor& indptr) {
  static const auto op =
      core::find_op<Result<Policy>(const at::Tensor&, const at::Tensor&)>(kSegmentCsr.of<Policy>());
  return op.call(src, indptr);
}
template <typename Policy>
Result<Policy> call_segment_coo(const at::Tensor& src, const at::Tensor& index,
                                std::optional<c10::SymInt> dim_size) {
  static const auto op = core::find_op<Result<Policy>(const at::Tensor&, const at::Tensor&,
                                                      std::optional<c10::SymInt>)>(kSegmentCoo.of<Policy>());
  return op.call(src, index, std::move(dim_size));
}
template <typename Policy>
InplaceResult<Policy> call_segment_coo_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index) {
  static const auto op =
      core::find_op<InplaceResult<Policy>(const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
          kSegmentCooInplace.of<Policy>());
  return op.call(out, src, index);
}
inline at::Tensor call_gather_csr(const at::Tensor& src, const at::Tensor& indptr,
                                  std::optional<c10::SymInt> dim_size) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, std::optional<c10::SymInt>)>(kGatherCsr);
  return op.call(src, indptr, std::move(dim_size));
}
inline at::Tensor call_gather_coo(const at::Tensor& src, const at::Tensor& index) {
  static const auto op = core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(kGatherCoo);
  return op.call(src, index);
}

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
// `op`: segment_<r>_csr's OpDef; arg allocated when `with_arg`.
SegmentCsr plan_segment_csr(const core::OpDef& op, const at::Tensor& src, const at::Tensor& indptr,
                            bool with_arg);
// The rows of positions 0 .. E - 1 by indptr [outer, N + 1] (int64): the
// segment holding each, N for one past the last segment. [E] when outer is 1.
// A binary search per position (gather_csr's kernels find rows on their own).
at::Tensor rows_of_positions(const at::Tensor& expanded_indptr, int64_t E);
// Runs segment_csr as a scatter over each position's row with a kernel of
// the device (N + 1 slots, the last for positions in no segment, cut off).
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
}  // namespace torchplug::scatter_detail
