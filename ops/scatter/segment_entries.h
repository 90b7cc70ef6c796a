#pragma once

// The entry points of segment and gather for one device, written once:
// segment_cpu.cpp and segment_cuda.cu register them with their device's
// kernels, a struct of
//   check(op, src)                      the device check (TORCHPLUG_CHECK_CPU/CUDA)
//   scatter<Policy>(ScatterProblem)     scatter's kernel (segment_coo's too)
//   segment_csr<Policy>(SegmentCsr)     segment_csr's kernel
//   gather(GatherProblem)               the gather kernel
// Devices are checked first, so that a tensor on another device is reported
// with both devices named; the device guard is taken before any planning,
// which may read values on the device (checked mode, default sizes).

#include "scatter_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>

#include <algorithm>

namespace torchplug::scatter_detail {

inline int64_t coo_dim(const char* op, const at::Tensor& index) {
  TORCH_CHECK(index.dim() >= 1, op, ": argument 'index' must have at least one dimension");
  return index.dim() - 1;
}

// segment_coo's default output size for an empty src: max(index) + 1 over the
// index broadcast to src's leading sizes (torch_scatter's rule), which an
// empty trailing size (no features) leaves non-empty; the plan's scatter rule
// would give 0.
inline int64_t coo_size_of_empty(const char* op, const at::Tensor& src, const at::Tensor& index) {
  core::check_index_dtype(op, "index", index);
  const auto leading = src.sizes().slice(0, std::min<size_t>(index.dim(), src.dim()));
  if (c10::multiply_integers(leading) == 0 || index.numel() == 0) return 0;
  return core::index_bounds(index).max + 1;
}

// The problem of a segment_csr whose indptr every slice shares, for the
// devices' indptr kernels (no index).
inline ScatterProblem shared_indptr_problem(const SegmentCsr& s) {
  ScatterProblem p;
  p.src = s.src;
  p.outer = s.outer;
  p.E = s.E;
  p.inner = s.inner;
  p.N = s.N;
  p.out = s.out;
  p.arg = s.arg;
  return p;
}

template <typename Kernels>
struct SegmentEntries {
  template <typename Policy>
  static Result<Policy> segment_csr(const at::Tensor& src, const at::Tensor& indptr) {
    const auto& def = kSegmentCsr.of<Policy>();
    const char* op = def.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    const SegmentCsr s = plan_segment_csr(def, src, indptr, Policy::kHasArg);
    Kernels::template segment_csr<Policy>(s);
    return results<Policy>(s.out, s.arg);
  }

  // out is overwritten (torch_scatter's segment_csr with out=).
  template <typename Policy>
  static InplaceResult<Policy> segment_csr_(const at::Tensor& out, const at::Tensor& src,
                                            const at::Tensor& indptr) {
    const auto& def = kSegmentCsr.of<Policy>();
    const char* op = def.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
    core::check_no_overlap(op, TORCHPLUG_ARG(out), {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    const SegmentCsr s = plan_segment_csr(def, src, indptr, Policy::kHasArg);
    core::check_same_dtype(op, TORCHPLUG_ARG(out), TORCHPLUG_ARG(src));
    TORCH_CHECK(out.sizes() == s.out.sizes(), op, ": argument 'out' of shape ", out.sizes(),
                " does not match the expected ", s.out.sizes());
    Kernels::template segment_csr<Policy>(s);
    out.copy_(s.out);
    if constexpr (Policy::kHasArg) return s.arg;
  }

  template <typename Policy>
  static Result<Policy> segment_coo(const at::Tensor& src, const at::Tensor& index,
                                    std::optional<c10::SymInt> dim_size) {
    const auto& def = kSegmentCoo.of<Policy>();
    const char* op = def.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    std::optional<int64_t> size;
    if (dim_size) {
      size = dim_size->expect_int();
    } else if (src.numel() == 0) {
      size = coo_size_of_empty(op, src, index);
    }
    const auto problem = core::plan<Policy>(def, src, index, coo_dim(op, index), size);
    check_sorted(op, index);
    Kernels::template scatter<Policy>(problem);
    return results<Policy>(problem);
  }

  template <typename Policy>
  static InplaceResult<Policy> segment_coo_(const at::Tensor& out, const at::Tensor& src,
                                            const at::Tensor& index) {
    const auto& def = kSegmentCoo.of<Policy>();
    const char* op = def.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    const auto problem = core::plan_inplace<Policy>(def, out, src, index, coo_dim(op, index));
    check_sorted(op, index);
    Kernels::template scatter<Policy>(problem);
    finish_inplace(problem, out);
    if constexpr (Policy::kHasArg) return problem.arg;
  }

  static at::Tensor gather_csr(const at::Tensor& src, const at::Tensor& indptr,
                               std::optional<c10::SymInt> dim_size) {
    const char* op = kGatherCsr.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    std::optional<int64_t> size;
    if (dim_size) size = dim_size->expect_int();
    const auto problem = plan_gather_csr(src, indptr, size);
    Kernels::gather(problem);
    return problem.out;
  }

  static at::Tensor gather_coo(const at::Tensor& src, const at::Tensor& index) {
    const char* op = kGatherCoo.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    const auto problem = plan_gather_coo(src, index);
    Kernels::gather(problem);
    return problem.out;
  }

  // The in-place gathers: out's size along dim is the number of positions.
  static void gather_(const char* op, const at::Tensor& out, const at::Tensor& result) {
    core::check_same_dtype(op, TORCHPLUG_ARG(out), TORCHPLUG_ARG(result));
    TORCH_CHECK(out.sizes() == result.sizes(), op, ": argument 'out' of shape ", out.sizes(),
                " does not match the expected ", result.sizes());
    out.copy_(result);
  }

  static void gather_csr_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& indptr) {
    const char* op = kGatherCsrInplace.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
    core::check_no_overlap(op, TORCHPLUG_ARG(out), {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
    const int64_t dim = std::max<int64_t>(indptr.dim() - 1, 0);
    TORCH_CHECK(out.dim() > dim, op, ": argument 'out' has ", out.dim(), " dimensions, too few for dim ", dim);
    gather_(op, out, gather_csr(src, indptr, c10::SymInt(out.size(dim))));
  }

  static void gather_coo_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index) {
    const char* op = kGatherCooInplace.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    core::check_no_overlap(op, TORCHPLUG_ARG(out), {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    gather_(op, out, gather_coo(src, index));
  }

  static void register_all(core::Library& m) {
    core::AllReductionOps::for_each([&](auto policy) {
      using Policy = decltype(policy);
      m.impl(kSegmentCsr.of<Policy>(), &segment_csr<Policy>);
      m.impl(kSegmentCsrInplace.of<Policy>(), &segment_csr_<Policy>);
      m.impl(kSegmentCoo.of<Policy>(), &segment_coo<Policy>);
      m.impl(kSegmentCooInplace.of<Policy>(), &segment_coo_<Policy>);
    });
    m.impl(kGatherCsr, &gather_csr);
    m.impl(kGatherCsrInplace, &gather_csr_);
    m.impl(kGatherCoo, &gather_coo);
    m.impl(kGatherCooInplace, &gather_coo_);
  }
};

}  // namespace torchplug::scatter_detail
