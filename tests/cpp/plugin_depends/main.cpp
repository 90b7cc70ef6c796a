// Differentiates segment_sum::segment_sum from C++: its backward finds
// torchplug::gather_csr in the dispatcher only if the scatter plugin was
// loaded with it. Exits non-zero on an error or a wrong gradient.

#include <segment_sum/segment_sum.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdio>

int main() {
  const auto src = at::randn({6, 3}, at::kDouble).requires_grad_();
  const auto indptr = at::tensor({0, 2, 2, 5, 6}, at::kLong);
  const auto grad_out = at::randn({4, 3}, at::kDouble);
  try {
    const auto out = segment_sum::segment_sum(src, indptr);
    const auto grad = torch::autograd::grad({out}, {src}, {grad_out})[0];
    const auto expected = grad_out.repeat_interleave(indptr.diff(), 0);
    if (!at::equal(grad, expected)) {
      std::fprintf(stderr, "FAILED: the gradient of segment_sum::segment_sum differs from the reference\n");
      return 1;
    }
  } catch (const c10::Error& error) {
    std::fprintf(stderr, "FAILED: %s\n", error.what_without_backtrace());
    return 1;
  }
  std::printf("ok: segment_sum's backward called torchplug::gather_csr\n");
  return 0;
}
