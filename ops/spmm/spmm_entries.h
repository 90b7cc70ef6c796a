#pragma once

// spmm's entry points for one device, written once: spmm_cpu.cpp and
// spmm_cuda.cu register them with a struct of
//   check(op, x)                  the device check
//   run<Policy>(SpmmProblem)      the device's kernel
// Devices are checked first; the device guard is taken before planning,
// which may read rowptr and col on the device (checked mode).

#include "spmm_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torchplug::spmm_detail {

template <typename Kernels>
struct SpmmEntries {
  template <typename Policy>
  static Result<Policy> spmm(const at::Tensor& rowptr, const at::Tensor& col, const std::optional<at::Tensor>& value,
                             const at::Tensor& x) {
    constexpr const char* op = kOpName<Policy>;
    core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(x)});
    Kernels::check(op, x);
    const c10::DeviceGuard guard(x.device());
    const SpmmProblem p = plan<Policy>(rowptr, col, value, x);
    Kernels::template run<Policy>(p);
    return scatter_detail::results<Policy>(p.out, p.arg);
  }

  static void register_all(torch::Library& m) {
#define TORCHPLUG_SPMM_IMPL(name, Policy) m.impl("spmm_" #name, &spmm<Policy>);
    TORCHPLUG_FOR_EACH_SPMM_REDUCTION(TORCHPLUG_SPMM_IMPL)
#undef TORCHPLUG_SPMM_IMPL
  }
};

}  // namespace torchplug::spmm_detail
