// GoogleTest suite for the composites through the public C++ API: the
// libtorch user's view, autograd included. References are plain libtorch on
// each group's values (torch::softmax, torch::logsumexp, torch::std) and its
// autograd on the same.

#include <torchplug/core/registry.h>
#include <torchplug/ops/composite.h>

#include "torchplug_testing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using torchplug::testing::leaf;
using torchplug::testing::throws_with;

// Each group's rows of src ([E, F], index [E]) through `per_group` (a function
// of the group's [n, F] rows along dim 0), scattered back or stacked.
template <typename F>
at::Tensor per_source(const at::Tensor& src, const at::Tensor& index, int64_t n, F per_group) {
  auto out = torch::zeros_like(src);
  for (int64_t row = 0; row < n; ++row) {
    const auto members = (index == row).nonzero().view(-1);
    if (members.numel() > 0) out.index_put_({members}, per_group(src.index_select(0, members)));
  }
  return out;
}

template <typename F>
at::Tensor per_row(const at::Tensor& src, const at::Tensor& index, int64_t n, F per_group, double empty) {
  std::vector<at::Tensor> rows;
  for (int64_t row = 0; row < n; ++row) {
    const auto members = (index == row).nonzero().view(-1);
    rows.push_back(members.numel() > 0 ? per_group(src.index_select(0, members))
                                       : torch::full({src.size(1)}, empty, src.options()));
  }
  return torch::stack(rows);
}

struct Composite : ::testing::Test {
  at::Tensor src = torch::randn({40, 5}, torch::kDouble);
  // Every group 0 .. 6 non-empty, in random order.
  at::Tensor index = torch::cat({torch::arange(7), torch::randint(0, 7, {33}, torch::kLong)})
                         .index_select(0, torch::randperm(40));
  int64_t n = 8;  // row 7 stays empty
};

TEST_F(Composite, SoftmaxMatchesEachGroupsSoftmax) {
  const auto want = per_source(src, index, n, [](const at::Tensor& g) { return torch::softmax(g, 0); });
  EXPECT_TRUE(torch::allclose(torchplug::scatter_softmax(src, index, 0, n), want));
  const auto log_want = per_source(src, index, n, [](const at::Tensor& g) { return torch::log_softmax(g, 0); });
  EXPECT_TRUE(torch::allclose(torchplug::scatter_log_softmax(src, index, 0, n), log_want));
}

TEST_F(Composite, LogSumExpAndStdMatchEachGroup) {
  const auto lse = per_row(src, index, n, [](const at::Tensor& g) { return torch::logsumexp(g, 0); }, 0.0);
  EXPECT_TRUE(torch::allclose(torchplug::scatter_logsumexp(src, index, 0, std::nullopt, n), lse));
  for (const bool unbiased : {true, false}) {
    const auto want = per_row(src, index, n, [&](const at::Tensor& g) {
      return g.size(0) > 1 || !unbiased ? torch::std(g, 0, unbiased) : torch::zeros({g.size(1)}, g.options());
    }, 0.0);
    EXPECT_TRUE(torch::allclose(torchplug::scatter_std(src, index, 0, std::nullopt, n, unbiased), want));
  }
}

TEST_F(Composite, LogSumExpIntoOutTakesOutsValues) {
  auto out = torch::randn({n, 5}, torch::kDouble);
  const auto before = out.clone();
  const auto result = torchplug::scatter_logsumexp(src, index, 0, out);
  EXPECT_TRUE(result.is_same(out));
  const auto want = torch::stack({torchplug::scatter_logsumexp(src, index, 0, std::nullopt, n), before})
                        .logsumexp(0);
  const auto empty = torch::arange(n) == 7;
  EXPECT_TRUE(torch::allclose(out.index({~empty}), want.index({~empty})));
  EXPECT_TRUE(torch::equal(out.index({empty}), before.index({empty})));
}

TEST_F(Composite, SoftmaxCsrMatchesScatterSoftmax) {
  const auto sorted = std::get<0>(index.sort());
  const auto counts = torch::bincount(sorted, {}, n);
  const auto indptr = torch::cat({torch::zeros({1}, torch::kLong), counts.cumsum(0)});
  EXPECT_TRUE(torch::allclose(torchplug::softmax_csr(src, indptr, 0),
                              torchplug::scatter_softmax(src, sorted, 0, n)));
}

TEST_F(Composite, AutogradRunsInCpp) {
  const auto g = torch::randn_like(src);
  const auto x = leaf(src);
  (torchplug::scatter_softmax(x, index, 0, n) * g).sum().backward();
  const auto y = leaf(src);
  (per_source(y, index, n, [](const at::Tensor& t) { return torch::softmax(t, 0); }) * g).sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), y.grad()));

  const auto a = leaf(src);
  torchplug::scatter_std(a, index, 0, std::nullopt, n).sum().backward();
  const auto b = leaf(src);
  per_row(b, index, n, [](const at::Tensor& t) {
    return t.size(0) > 1 ? torch::std(t, 0) : t.sum(0) * 0;
  }, 0.0).sum().backward();
  EXPECT_TRUE(torch::allclose(a.grad(), b.grad()));
}

TEST_F(Composite, ErrorsNameTheOpAndArgument) {
  EXPECT_TRUE(throws_with([&] { torchplug::scatter_softmax(src.to(torch::kLong), index, 0); },
                          {"torchplug::scatter_softmax", "src"}));
  EXPECT_TRUE(throws_with<c10::IndexError>([&] { torchplug::scatter_std(src, index, 0, std::nullopt, 3); },
                                           {"torchplug::scatter_std", "index"}));
  const auto bad = torch::tensor({0, 5, 30}, torch::kLong);
  EXPECT_TRUE(throws_with<c10::IndexError>([&] { torchplug::softmax_csr(src, bad, 0); },
                                           {"torchplug::softmax_csr", "indptr", "40"}));
}

TEST(CompositeRegistry, ListsEveryOpAsDifferentiable) {
  for (const char* name : {"scatter_softmax", "scatter_log_softmax", "scatter_logsumexp", "scatter_std",
                           "softmax_csr"}) {
    const auto info = torchplug::core::Registry::instance().find(name);
    ASSERT_TRUE(info.has_value()) << name;
    EXPECT_EQ(info->plugin, "composite");
    EXPECT_TRUE(info->differentiable) << name;
  }
}

}  // namespace
