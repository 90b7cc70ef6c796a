// GoogleTest suite for scatter_mean, scatter_mul, scatter_min and scatter_max
// (and scatter(reduce=)), through the public C++ API: the libtorch user's
// view, autograd included. References come from plain libtorch on the same
// inputs: scatter_reduce with include_self=false on a base of the empty value,
// arg by a plain loop. Small integer values (powers of two for products) keep
// every result but mean's exact.

#include <torchplug/core/registry.h>
#include <torchplug/ops/scatter.h>

#include "torchplug_testing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using torchplug::testing::leaf;
using torchplug::testing::same;
using torchplug::testing::throws_with;

const std::vector<std::string> kReductions = {"sum", "mean", "mul", "min", "max"};

std::string native(const std::string& reduce) {
  if (reduce == "mul") return "prod";
  if (reduce == "min" || reduce == "max") return "a" + reduce;
  return reduce;
}

// reduce(src) along dim 0 into n slots (index 1-D), empty slots at torch_scatter's value.
at::Tensor reference(const at::Tensor& src, const at::Tensor& index, int64_t n, const std::string& reduce) {
  auto sizes = src.sizes().vec();
  sizes[0] = n;
  const auto full = index.view({-1, 1}).expand_as(src);
  auto out = torch::zeros(sizes, src.options()).scatter_reduce(0, full, src, native(reduce), false);
  if (reduce == "mul") {
    const auto count = torch::zeros({n}, torch::kLong).index_add_(0, index, torch::ones_like(index));
    out = torch::where(count.view({-1, 1}) == 0, torch::ones_like(out), out);
  }
  return out;
}

// The smallest position of index == slot whose value equals values[slot], E if none.
at::Tensor reference_arg(const at::Tensor& src, const at::Tensor& index, const at::Tensor& values) {
  const int64_t E = src.size(0);
  auto arg = torch::full(values.sizes(), E, torch::kLong);
  auto a = arg.accessor<int64_t, 2>();
  const auto s = src.to(torch::kDouble);
  const auto v = values.to(torch::kDouble);
  for (int64_t e = E - 1; e >= 0; --e) {
    const int64_t slot = index[e].item<int64_t>();
    for (int64_t f = 0; f < src.size(1); ++f) {
      if (s[e][f].item<double>() == v[slot][f].item<double>()) a[slot][f] = e;
    }
  }
  return arg;
}

TEST(ScatterReduce, EveryReductionMatchesScatterReduce) {
  torch::manual_seed(1);
  for (auto dtype : {at::kFloat, at::kDouble, at::kLong, at::kBFloat16}) {
    for (const auto& reduce : kReductions) {
      SCOPED_TRACE(reduce + " " + c10::toString(dtype));
      // Products of powers of two stay exact in every dtype.
      const int64_t high = reduce == "mul" ? 3 : 4;
      const auto src = torch::randint(1 - high, high, {300, 5}, torch::kDouble).to(dtype);
      const auto index = torch::randint(0, 40, {300}, torch::kLong);
      const int64_t n = 45;  // the last slots stay empty
      const auto got = torchplug::scatter(src, index, 0, std::nullopt, n, reduce);
      if (reduce == "mean" && dtype == at::kLong) {  // integers floor-divide
        const auto sum = reference(src, index, n, "sum");
        const auto count = torch::zeros({n}, torch::kLong).index_add_(0, index, torch::ones_like(index));
        EXPECT_TRUE(same(got, torch::div(sum, count.clamp_min(1).view({-1, 1}), "floor")));
      } else if (reduce == "mean") {
        EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), reference(src.to(torch::kDouble), index, n, reduce),
                                    dtype == at::kBFloat16 ? 1e-2 : 1e-6, 1e-6));
      } else {
        EXPECT_TRUE(same(got, reference(src, index, n, reduce)));
      }
    }
  }
}

TEST(ScatterReduce, MinMaxArgIsTheFirstPositionHoldingTheValue) {
  torch::manual_seed(2);
  const auto src = torch::randint(-2, 3, {200, 4}, torch::kFloat);  // many ties
  const auto index = torch::randint(0, 20, {200}, torch::kLong);
  for (bool is_max : {false, true}) {
    const auto [values, arg] = is_max ? torchplug::scatter_max(src, index, 0, std::nullopt, 25)
                                      : torchplug::scatter_min(src, index, 0, std::nullopt, 25);
    EXPECT_TRUE(same(values, reference(src, index, 25, is_max ? "max" : "min")));
    EXPECT_TRUE(same(arg, reference_arg(src, index, values)));
    EXPECT_TRUE((arg.slice(0, 20) == 200).all().item<bool>());  // empty slots: E
  }
}

TEST(ScatterReduce, OutTakesPart) {
  const auto src = torch::tensor({1.0f, 5.0f, -2.0f, 4.0f}).view({4, 1});
  const auto index = torch::tensor({0, 0, 1, 1}, torch::kLong);
  auto out = torch::tensor({3.0f, 10.0f, 7.0f}).view({3, 1});
  const auto [values, arg] = torchplug::scatter_max(src, index, 0, out);
  EXPECT_TRUE(values.is_same(out));
  EXPECT_TRUE(same(out.view({3}), torch::tensor({5.0f, 10.0f, 7.0f})));
  EXPECT_TRUE(same(arg.view({3}), torch::tensor({1, 4, 4}, torch::kLong)));  // out's own value: E
  auto mean_out = torch::tensor({3.0f, 10.0f, 7.0f}).view({3, 1});
  torchplug::scatter_mean(src, index, 0, mean_out);  // (out + sum) / count
  EXPECT_TRUE(same(mean_out.view({3}), torch::tensor({4.5f, 6.0f, 7.0f})));
  auto mul_out = torch::tensor({3.0f, 10.0f, 7.0f}).view({3, 1});
  torchplug::scatter_mul(src, index, 0, mul_out);
  EXPECT_TRUE(same(mul_out.view({3}), torch::tensor({15.0f, -80.0f, 7.0f})));
}

TEST(ScatterReduceAutograd, GradientsFromCpp) {
  const auto index = torch::tensor({0, 0, 0, 1, 1, 2}, torch::kLong);
  const auto src = leaf(torch::tensor({2.0, 0.0, 3.0, 4.0, 6.0, 5.0}, torch::kDouble).view({6, 1}));
  // mean: 1 / count
  torchplug::scatter_mean(src, index, 0).sum().backward();
  EXPECT_TRUE(torch::allclose(src.grad().view({6}),
                              torch::tensor({1 / 3.0, 1 / 3.0, 1 / 3.0, 0.5, 0.5, 1.0}, torch::kDouble)));
  src.mutable_grad().reset();
  // mul: the product of the others; slot 0 holds one zero
  torchplug::scatter_mul(src, index, 0).sum().backward();
  EXPECT_TRUE(same(src.grad().view({6}), torch::tensor({0.0, 6.0, 0.0, 6.0, 4.0, 1.0}, torch::kDouble)));
  src.mutable_grad().reset();
  // max: to the arg only
  std::get<0>(torchplug::scatter_max(src, index, 0)).sum().backward();
  EXPECT_TRUE(same(src.grad().view({6}), torch::tensor({0.0, 0.0, 1.0, 0.0, 1.0, 1.0}, torch::kDouble)));
}

TEST(ScatterReduceErrors, NameTheOpAndTheArgument) {
  const auto src = torch::randn({4, 2});
  EXPECT_TRUE(throws_with([&] { torchplug::scatter_max(src, torch::zeros({4}), 0); },
                          {"torchplug::scatter_max", "'index'"}));
  EXPECT_TRUE(throws_with<c10::IndexError>(
      [&] { torchplug::scatter_mean(src, torch::tensor({0, 1, 2, 9}, torch::kLong), 0, std::nullopt, 5); },
      {"torchplug::scatter_mean", "'index'"}));
  EXPECT_TRUE(throws_with<c10::ValueError>(
      [&] { torchplug::scatter(src, torch::zeros({4}, torch::kLong), 0, std::nullopt, std::nullopt, "median"); },
      {"torchplug::scatter", "'reduce'", "median"}));
}

TEST(ScatterReduce, RegistryListsEveryForm) {
  for (const auto& reduce : kReductions) {
    for (const std::string suffix : {"", "_"}) {
      const auto info = torchplug::core::Registry::instance().find("scatter_" + reduce + suffix);
      ASSERT_TRUE(info.has_value()) << reduce << suffix;
      EXPECT_EQ(info->plugin, "scatter");
      EXPECT_TRUE(info->differentiable);
      EXPECT_TRUE(std::count(info->backends.begin(), info->backends.end(), "CPU") > 0);
    }
  }
}

TEST(ScatterReduceCuda, MatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto info = torchplug::core::Registry::instance().find("scatter_max");
  if (std::count(info->backends.begin(), info->backends.end(), "CUDA") == 0) {
    GTEST_SKIP() << "torchplug built without CUDA kernels";
  }
  torch::manual_seed(3);
  for (const auto& reduce : kReductions) {
    for (int64_t f : {1, 16}) {
      SCOPED_TRACE(reduce + " F=" + std::to_string(f));
      const auto src = torch::randint(-3, 4, {5000, f}, torch::kDouble).to(torch::kFloat);
      const auto index = torch::randint(0, 300, {5000}, torch::kLong);
      const auto cpu = torchplug::scatter(src, index, 0, std::nullopt, 300, reduce);
      const auto gpu = torchplug::scatter(src.cuda(), index.cuda(), 0, std::nullopt, 300, reduce);
      EXPECT_TRUE(torch::allclose(gpu.cpu(), cpu, 1e-5, 1e-5));
    }
  }
}

}  // namespace
