// torchplug::add: schema, registry entry, C++ API, input checks, Meta kernel.

#include "add.h"

#include "add_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/registry.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace torchplug {
namespace add_detail {
namespace {

constexpr std::initializer_list<at::ScalarType> kDtypes = {
    at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kByte, at::kChar, at::kShort, at::kInt,
    at::kLong};

void check_dtype(const char* arg, const at::Tensor& t) {
  core::check_dtype_in(kOp, arg, t, kDtypes);
}

c10::SymDimVector broadcast_shape(const at::Tensor& a, const at::Tensor& b) {
  const auto& sa = a.sym_sizes();
  const auto& sb = b.sym_sizes();
  const auto ndim = std::max(sa.size(), sb.size());
  for (size_t i = 0; i < ndim; ++i) {
    const bool in_a = i < sa.size();
    const bool in_b = i < sb.size();
    if (!in_a || !in_b) continue;
    const auto& x = sa[sa.size() - 1 - i];
    const auto& y = sb[sb.size() - 1 - i];
    TORCH_CHECK(x == y || x == 1 || y == 1, kOp,
                ": arguments 'a' of shape ", sa, " and 'b' of shape ", sb,
                " cannot be broadcast together (dimension ", -1 - static_cast<int64_t>(i), ")");
  }
  return at::infer_size_symdimvector(sa, sb);
}

at::Tensor add_meta(const at::Tensor& a, const at::Tensor& b) {
  check_dtype("a", a);
  check_dtype("b", b);
  return at::empty_symint(broadcast_shape(a, b), a.options().dtype(at::result_type(a, b)));
}

}  // namespace

AddOperands prepare(const at::Tensor& a, const at::Tensor& b) {
  core::check_same_device(kOp, {TORCHPLUG_ARG(a), TORCHPLUG_ARG(b)});
  auto out = add_meta(a, b);  // checks dtypes and shapes; allocates on a's device
  return {a, b, std::move(out)};
}

}  // namespace add_detail

at::Tensor add(const at::Tensor& a, const at::Tensor& b) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torchplug::add", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(a, b);
}

}  // namespace torchplug

TORCH_LIBRARY_FRAGMENT(torchplug, m) {
  torchplug::core::define(
      m, {"add(Tensor a, Tensor b) -> Tensor",
          "add",
          std::vector<c10::ScalarType>(torchplug::add_detail::kDtypes),
          "Elementwise a + b with broadcasting and type promotion."});
}

TORCH_LIBRARY_IMPL(torchplug, Meta, m) {
  m.impl("add", &torchplug::add_detail::add_meta);
}
