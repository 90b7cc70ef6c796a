#pragma once

// The composites' entry points for one device, written once: composite_cpu.cpp
// and composite_cuda.cu register them with a struct of
//   check(op, src)                        the device check
//   run<Program>(RowsProblem, option)     the device's row-program kernels
// Devices are checked first, so that a tensor on another device is reported
// with both named; the device guard is taken before planning, which may read
// index values on the device (checked mode, default sizes).

#include "composite_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <c10/core/DeviceGuard.h>

namespace torchplug::composite_detail {

template <typename Kernels>
struct CompositeEntries {
  template <bool kLog>
  static at::Tensor softmax(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                            std::optional<int64_t> dim_size) {
    const core::OpDef& def = kLog ? kScatterLogSoftmax : kScatterSoftmax;
    const char* op = def.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    const RowsProblem r = plan_emit(def, src, index, dim, dim_size);
    Kernels::template run<core::SoftmaxProgram>(r, kLog);
    return r.p.out;
  }

  static at::Tensor softmax_csr(const at::Tensor& src, const at::Tensor& indptr, int64_t dim) {
    const char* op = kSoftmaxCsr.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(indptr)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    const RowsProblem r = plan_softmax_csr(kSoftmaxCsr, src, indptr, dim);
    Kernels::template run<core::SoftmaxProgram>(r, false);
    return r.p.out;
  }

  static at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& out, const at::Tensor& index,
                                     int64_t dim, std::optional<int64_t> dim_size, bool log) {
    const char* op = kScatterSoftmaxBackward.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(grad), TORCHPLUG_ARG(out), TORCHPLUG_ARG(index)});
    Kernels::check(op, grad);
    const c10::DeviceGuard guard(grad.device());
    const RowsProblem r = plan_backward(kScatterSoftmaxBackward, grad, out, index, dim, dim_size);
    Kernels::template run<core::SoftmaxBackwardProgram>(r, log);
    return r.p.out;
  }

  // The reducing programs: one result per group.
  template <template <typename> class Program>
  static at::Tensor reduce(const core::OpDef& def, const at::Tensor& src, const at::Tensor& index, int64_t dim,
                           std::optional<c10::SymInt> dim_size, bool option) {
    const char* op = def.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    std::optional<int64_t> size;
    if (dim_size) size = dim_size->expect_int();
    const RowsProblem r = plan_reduce(def, src, index, dim, size);
    Kernels::template run<Program>(r, option);
    return r.p.out;
  }

  static at::Tensor logsumexp(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                              std::optional<c10::SymInt> dim_size) {
    return reduce<core::LogSumExpProgram>(kScatterLogsumexp, src, index, dim, std::move(dim_size), false);
  }

  static void logsumexp_(const at::Tensor& out, const at::Tensor& src, const at::Tensor& index, int64_t dim) {
    const char* op = kScatterLogsumexpInplace.name().c_str();
    core::check_same_device(op, {TORCHPLUG_ARG(out), TORCHPLUG_ARG(src), TORCHPLUG_ARG(index)});
    Kernels::check(op, src);
    const c10::DeviceGuard guard(src.device());
    const RowsProblem r = plan_reduce_into(kScatterLogsumexpInplace, out, src, index, dim);
    Kernels::template run<core::LogSumExpProgram>(r, true);
    core::finish_inplace(r.p, out);
  }

  static at::Tensor standard_deviation(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                       std::optional<c10::SymInt> dim_size, bool unbiased) {
    return reduce<core::StdProgram>(kScatterStd, src, index, dim, std::move(dim_size), unbiased);
  }

  static void register_all(core::Library& m) {
    m.impl(kScatterSoftmax, &softmax<false>);
    m.impl(kScatterLogSoftmax, &softmax<true>);
    m.impl(kSoftmaxCsr, &softmax_csr);
    m.impl(kScatterSoftmaxBackward, &softmax_backward);
    m.impl(kScatterLogsumexp, &logsumexp);
    m.impl(kScatterLogsumexpInplace, &logsumexp_);
    m.impl(kScatterStd, &standard_deviation);
  }
};

}  // namespace torchplug::composite_detail
