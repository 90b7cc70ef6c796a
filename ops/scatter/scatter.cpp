// The scatter family: definitions, C++ API and Meta kernels. One op per
// reduction of core/reduce/policy.h's table (schemas in scatter_schema.h),
// each in two forms with honest schemas for the compiler stacks:
//   scatter_<r>(src, index, dim, dim_size) -> out          (min, max: (out, arg))
//   scatter_<r>_(out, src, index, dim)     -> ()           (min, max: arg)
// the second reducing into out in place, out's values taking part.

#include "scatter.h"

#include "scatter_kernel.h"
#include "torchplug/core/broadcast.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"
#include "torchplug/core/registry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>

#include <string>

namespace torchplug {

namespace {

// The C++ API's shared part: out= goes to the in-place op, after checking that
// dim_size agrees with it.
template <typename Policy>
scatter_detail::Result<Policy> scatter_api(const at::Tensor& src, const at::Tensor& index,
                                           int64_t dim, const std::optional<at::Tensor>& out,
                                           std::optional<int64_t> dim_size) {
  using namespace scatter_detail;
  if (!out.has_value()) {
    std::optional<c10::SymInt> size;
    if (dim_size) size = c10::SymInt(*dim_size);
    return call_scatter<Policy>(src, index, dim, std::move(size));
  }
  const char* op = kScatter.of<Policy>().name().c_str();
  const int64_t d = core::normalize_dim(op, dim, src.dim());
  if (dim_size && out->dim() > d) {  // an out of the wrong rank is the op's to refuse
    TORCH_CHECK(*dim_size == out->size(d), op, ": argument 'dim_size' (", *dim_size,
                ") disagrees with out.size(", d, ") (", out->size(d), ")");
  }
  if constexpr (Policy::kHasArg) {
    auto arg = call_scatter_<Policy>(*out, src, index, dim);
    return {*out, arg};
  } else {
    call_scatter_<Policy>(*out, src, index, dim);
    return *out;
  }
}

}  // namespace

using core::MaxPolicy;
using core::MeanPolicy;
using core::MinPolicy;
using core::MulPolicy;
using core::SumPolicy;

at::Tensor scatter_sum(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                       const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size) {
  return scatter_api<SumPolicy>(src, index, dim, out, dim_size);
}
at::Tensor scatter_mean(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                        const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size) {
  return scatter_api<MeanPolicy>(src, index, dim, out, dim_size);
}
at::Tensor scatter_mul(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                       const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size) {
  return scatter_api<MulPolicy>(src, index, dim, out, dim_size);
}
std::tuple<at::Tensor, at::Tensor> scatter_min(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                               const std::optional<at::Tensor>& out,
                                               std::optional<int64_t> dim_size) {
  return scatter_api<MinPolicy>(src, index, dim, out, dim_size);
}
std::tuple<at::Tensor, at::Tensor> scatter_max(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                               const std::optional<at::Tensor>& out,
                                               std::optional<int64_t> dim_size) {
  return scatter_api<MaxPolicy>(src, index, dim, out, dim_size);
}

at::Tensor scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                   const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size,
                   std::string_view reduce) {
  return core::AllReductionOps::visit("torchplug::scatter", reduce, [&](auto policy) -> at::Tensor {
    auto result = scatter_api<decltype(policy)>(src, index, dim, out, dim_size);
    if constexpr (decltype(policy)::kHasArg) {
      return std::get<0>(result);
    } else {
      return result;
    }
  });
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  torchplug::scatter_detail::kScatter.define_all(m);
  torchplug::scatter_detail::kScatterInplace.define_all(m);
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  using namespace torchplug::scatter_detail;
  torchplug::core::AllReductionOps::for_each([&](auto policy) {
    using Policy = decltype(policy);
    m.impl(kScatter.of<Policy>(), [](const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                     std::optional<c10::SymInt> dim_size) {
      return meta<Policy>(kScatter.of<Policy>(), src, index, dim, dim_size);
    });
    m.impl(kScatterInplace.of<Policy>(), [](const at::Tensor& out, const at::Tensor& src,
                                            const at::Tensor& index, int64_t dim) {
      return meta_inplace<Policy>(kScatter.of<Policy>(), out, src, index, dim);
    });
  });
}
