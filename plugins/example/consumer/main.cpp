// Calls example::edge_dot and example::segment_l2norm from C++ under autograd
// and compares their outputs and gradients with plain libtorch ops; exits
// non-zero on a mismatch. segment_l2norm's backward calls torchplug::gather_csr
// through the dispatcher: the scatter plugin, which nothing here names, is
// loaded because the example plugin depends on it.

#include <example/example.h>

#include <torchplug/core/registry.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

bool close(const char* what, const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.sizes() == expected.sizes() && at::allclose(actual, expected, 1e-10, 1e-12)) return true;
  std::fprintf(stderr, "mismatch in %s: largest difference %g\n", what,
               actual.sizes() == expected.sizes() ? (actual - expected).abs().max().item<double>() : -1.0);
  return false;
}

// segment_l2norm of segments of lengths 3, 0, 5 and 2 against
// at::linalg_vector_norm per segment, forward and backward.
bool segment_l2norm_matches() {
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const auto src = at::randn({10, 4}, options).requires_grad_();
  const std::vector<int64_t> bounds{0, 3, 3, 8, 10};
  const auto indptr = at::tensor(bounds);
  const auto grad_out = at::randn({4, 4}, options);

  const auto out = example::segment_l2norm(src, indptr);
  const auto grad = torch::autograd::grad({out}, {src}, {grad_out})[0];
  std::vector<at::Tensor> norms;
  for (int64_t i = 0; i < 4; ++i) {
    norms.push_back(at::linalg_vector_norm(src.narrow(0, bounds[i], bounds[i + 1] - bounds[i]), 2, {0}));
  }
  const auto expected = at::stack(norms);
  const auto expected_grad = torch::autograd::grad({expected}, {src}, {grad_out})[0];
  bool ok = close("segment_l2norm out", out, expected);
  return close("segment_l2norm grad src", grad, expected_grad) && ok;
}

}  // namespace

int main() {
  // Linked, the plugin registered its op when the program started.
  const auto info = torchplug::core::Registry::instance().find("example::edge_dot");
  if (!info || info->plugin != "example" || !info->differentiable) {
    std::fprintf(stderr, "example::edge_dot is not in the registry as a differentiable op of plugin 'example'\n");
    return 1;
  }

  at::manual_seed(0);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const auto x = at::randn({40, 16}, options).requires_grad_();
  const auto y = at::randn({30, 16}, options).requires_grad_();
  const auto src = at::randint(40, {200}, at::kLong);
  const auto dst = at::randint(30, {200}, at::kLong);
  const auto grad_out = at::randn({200}, options);

  const auto out = example::edge_dot(x, y, src, dst);
  const auto grads = torch::autograd::grad({out}, {x, y}, {grad_out});
  const auto expected = (x.index_select(0, src) * y.index_select(0, dst)).sum(-1);
  const auto expected_grads = torch::autograd::grad({expected}, {x, y}, {grad_out});

  bool ok = close("out", out, expected);
  ok = close("grad x", grads[0], expected_grads[0]) && ok;
  ok = close("grad y", grads[1], expected_grads[1]) && ok;

  // A bad argument is a c10::Error naming the op and the argument.
  try {
    example::edge_dot(x, y, src.to(at::kInt), dst);
    std::fprintf(stderr, "an int32 src was accepted\n");
    ok = false;
  } catch (const c10::Error& error) {
    const std::string message = error.what_without_backtrace();
    if (message.find("example::edge_dot: argument 'src'") == std::string::npos) {
      std::fprintf(stderr, "unexpected error: %s\n", message.c_str());
      ok = false;
    }
  }

  ok = segment_l2norm_matches() && ok;

  std::string backends;
  for (const auto& backend : info->backends) backends += " " + backend;
  std::printf("%s: example::edge_dot (kernels:%s) scored %ld edges; example::segment_l2norm with its backward\n",
              ok ? "ok" : "FAILED", backends.c_str(), static_cast<long>(out.size(0)));
  return ok ? 0 : 1;
}
