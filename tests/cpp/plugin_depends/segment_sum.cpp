// segment_sum::segment_sum, whose gradient is torchplug::gather_csr of the
// output's, called through the dispatcher: no symbol of libtorchplug_scatter
// is used, so only DEPENDS scatter makes it load with this plugin.

#include "segment_sum.h"

#include <torchplug/core/autograd.h>
#include <torchplug/core/library.h>

#include <ATen/ATen.h>

namespace segment_sum {
namespace {

const torchplug::core::OpDef kSegmentSum{"segment_sum::segment_sum(Tensor src, Tensor indptr) -> Tensor",
                                         {at::kDouble}, "Sums src's rows indptr[i] .. indptr[i + 1]."};

at::Tensor segment_sum_cpu(const at::Tensor& src, const at::Tensor& indptr) {
  kSegmentSum.check_dtypes({TORCHPLUG_ARG(src)});
  const auto segments = indptr.numel() - 1;
  const auto rows = at::repeat_interleave(at::arange(segments, indptr.options()), indptr.diff());
  return at::zeros({segments, src.size(1)}, src.options()).index_add_(0, rows, src);
}

struct SegmentSumFunction : torch::autograd::Function<SegmentSumFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& src, const at::Tensor& indptr) {
    ctx->save_for_backward({indptr});
    ctx->saved_data["rows"] = src.sym_size(0);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return segment_sum(src, indptr);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto gather_csr =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("torchplug::gather_csr", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, std::optional<c10::SymInt>)>();
    const auto indptr = ctx->get_saved_variables()[0];
    return {gather_csr.call(grads[0], indptr, ctx->saved_data["rows"].toSymInt()), {}};
  }
};

}  // namespace

at::Tensor segment_sum(const at::Tensor& src, const at::Tensor& indptr) {
  static const auto op = torchplug::core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(kSegmentSum);
  return op.call(src, indptr);
}

}  // namespace segment_sum

TORCHPLUG_LIBRARY(segment_sum, m) { m.define(segment_sum::kSegmentSum); }
TORCHPLUG_LIBRARY_IMPL(segment_sum, CPU, m) { m.impl("segment_sum", &segment_sum::segment_sum_cpu); }
TORCHPLUG_LIBRARY_IMPL(segment_sum, Autograd, m) {
  m.impl("segment_sum", torchplug::core::autograd_kernel<segment_sum::SegmentSumFunction>(segment_sum::kSegmentSum));
}
