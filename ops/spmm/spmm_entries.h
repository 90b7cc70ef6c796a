#pragma once

// spmm's entry points for one device, written once: spmm_cpu.cpp and
// spmm_cuda.cu register them with a struct of
//   check(op, arg, t)             the device check of argument arg
//   run<Policy>(SpmmProblem)      the device's spmm kernel
//   transpose(TransposeProblem)   its spmm_transpose kernel
//   sddmm(SddmmProblem)           its sddmm kernel
// Devices are checked first; the device guard is taken before planning,
// which may read the index tensors on the device (checked mode).

#include "spmm_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <c10/core/DeviceGuard.h>

namespace torchplug::spmm_detail {

template <typename Kernels>
struct SpmmEntries {
  template <typename Policy>
  static Result<Policy> spmm(const at::Tensor& rowptr, const at::Tensor& col, const OptTensor& value,
                             const at::Tensor& x, const OptTensor& colptr, const OptTensor& row,
                             const OptTensor& perm) {
    const char* op = kSpmm.of<Policy>().name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(x)});
    Kernels::check(op, "x", x);
    const c10::DeviceGuard guard(x.device());
    const SpmmProblem p = plan<Policy>(rowptr, col, value, x, colptr, row, perm);
    Kernels::template run<Policy>(p);
    return core::results<Policy>(p.out, p.arg);
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> transpose(const at::Tensor& rowptr, const at::Tensor& col,
                                                                  int64_t num_cols) {
    const char* op = kSpmmTranspose.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col)});
    Kernels::check(op, "col", col);
    const c10::DeviceGuard guard(col.device());
    const TransposeProblem p = plan_transpose(rowptr, col, num_cols);
    Kernels::transpose(p);
    return {p.colptr, p.row, p.perm};
  }

  static at::Tensor sddmm(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                          bool mean, const OptTensor& colptr, const OptTensor& row, const OptTensor& perm,
                          int64_t heads) {
    const char* op = kSddmm.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(a), TORCHPLUG_ARG(b)});
    Kernels::check(op, "a", a);
    const c10::DeviceGuard guard(a.device());
    const SddmmProblem p = plan_sddmm(rowptr, col, a, b, mean, colptr, row, perm, heads);
    Kernels::sddmm(p);
    return p.out;
  }

  static void register_all(core::Library& m) {
    SpmmOps::for_each([&](auto policy) { m.impl(kSpmm.of<decltype(policy)>(), &spmm<decltype(policy)>); });
    m.impl(kSpmmTranspose, &transpose);
    m.impl(kSddmm, &sddmm);
  }
};

}  // namespace torchplug::spmm_detail
