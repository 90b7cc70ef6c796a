// torchplug::add CPU kernel: one pass over the output, parallel over the
// machine's cores through TensorIterator (which also walks broadcast strides).

#include "add_kernel.h"

#include "torchplug/core/checks.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include "torchplug/core/library.h"

#include <torch/library.h>

namespace torchplug::add_detail {

void add_kernel_cpu(const AddOperands& operands) {
  auto iter = at::TensorIteratorConfig()
                  .add_output(operands.out)
                  .add_const_input(operands.a)
                  .add_const_input(operands.b)
                  .build();
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, iter.common_dtype(), "torchplug::add", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    iter.for_each([](char** data, const int64_t* strides, int64_t n, int64_t rows) {
      for (int64_t r = 0; r < rows; ++r) {
        auto* out = data[0] + r * strides[3];
        const auto* a = data[1] + r * strides[4];
        const auto* b = data[2] + r * strides[5];
        if (strides[0] == sizeof(scalar_t) && strides[1] == sizeof(scalar_t) &&
            strides[2] == sizeof(scalar_t)) {
          // Contiguous row: a plain loop the compiler vectorises.
          auto* o = reinterpret_cast<scalar_t*>(out);
          const auto* x = reinterpret_cast<const scalar_t*>(a);
          const auto* y = reinterpret_cast<const scalar_t*>(b);
          for (int64_t i = 0; i < n; ++i) {
            o[i] = static_cast<scalar_t>(static_cast<opmath_t>(x[i]) + static_cast<opmath_t>(y[i]));
          }
          continue;
        }
        for (int64_t i = 0; i < n; ++i) {
          const auto x = *reinterpret_cast<const scalar_t*>(a + i * strides[1]);
          const auto y = *reinterpret_cast<const scalar_t*>(b + i * strides[2]);
          *reinterpret_cast<scalar_t*>(out + i * strides[0]) =
              static_cast<scalar_t>(static_cast<opmath_t>(x) + static_cast<opmath_t>(y));
        }
      }
    });
  });
}

namespace {

at::Tensor add_cpu(const at::Tensor& a, const at::Tensor& b) {
  auto operands = prepare(a, b);
  TORCHPLUG_CHECK_CPU(kOp, a);
  add_kernel_cpu(operands);
  return operands.out;
}

}  // namespace
}  // namespace torchplug::add_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  m.impl("add", &torchplug::add_detail::add_cpu);
}
