// GoogleTest suite for torchplug::add, through the public C++ API.
//
// The reference is libtorch's own `a + b` on the same inputs. One addition
// rounded once to the result dtype is deterministic (float16 and bfloat16 are
// added in float32 and rounded once by both), so results must match bit for bit.

#include <torchplug/core/registry.h>
#include <torchplug/ops/add.h>

#include "add_layout.h"
#include "torchplug_testing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace {

// torchplug::add is always called qualified: unqualified, ADL also finds at::add.

const std::vector<at::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat,
                                             at::kDouble, at::kByte,     at::kChar,
                                             at::kShort,  at::kInt,      at::kLong};

using torchplug::testing::leaf;
using torchplug::testing::same;
using torchplug::testing::throws_with;

constexpr const char* kOp = "torchplug::add";

// Random values of `dtype`: normal for floating types; for integers in [0, 60),
// so that sums fit every integer dtype, uint8 and int8 included.
at::Tensor values(at::IntArrayRef sizes, at::ScalarType dtype) {
  if (at::isFloatingType(dtype)) return torch::randn(sizes).to(dtype);
  return torch::randint(0, 60, sizes, torch::kLong).to(dtype);
}

// ---------------------------------------------------------------- forward

TEST(Add, EveryDtype) {
  torch::manual_seed(0);
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto a = values({4, 5}, dtype);
    const auto b = values({4, 5}, dtype);
    EXPECT_TRUE(same(torchplug::add(a, b), a + b));
  }
}

TEST(Add, Broadcasting) {
  torch::manual_seed(1);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{3, 1, 5}, {4, 1}}, {{5}, {2, 3, 5}}, {{}, {3}}, {{}, {}}, {{2, 1}, {1, 3}}};
  for (auto dtype : {at::kHalf, at::kFloat, at::kInt}) {
    for (const auto& [sa, sb] : shapes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + ::testing::PrintToString(sa) +
                   " + " + ::testing::PrintToString(sb));
      const auto a = values(sa, dtype);
      const auto b = values(sb, dtype);
      EXPECT_TRUE(same(torchplug::add(a, b), a + b));
      EXPECT_TRUE(same(torchplug::add(b, a), b + a));
    }
  }
}

TEST(Add, Empty) {
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto none = values({0}, dtype);
    EXPECT_TRUE(same(torchplug::add(none, none), torch::empty({0}, dtype)));
    EXPECT_TRUE(same(torchplug::add(values({1}, dtype), none), torch::empty({0}, dtype)));
    EXPECT_TRUE(same(torchplug::add(values({2, 0, 3}, dtype), values({3}, dtype)),
                     torch::empty({2, 0, 3}, dtype)));
  }
}

TEST(Add, TypePromotion) {
  torch::manual_seed(2);
  const std::vector<std::pair<at::ScalarType, at::ScalarType>> pairs = {
      {at::kHalf, at::kFloat},     {at::kInt, at::kHalf},  {at::kByte, at::kChar},
      {at::kLong, at::kDouble},    {at::kBFloat16, at::kHalf}, {at::kShort, at::kInt},
      {at::kBFloat16, at::kDouble}};
  for (const auto& [ta, tb] : pairs) {
    SCOPED_TRACE(std::string(c10::toString(ta)) + " + " + c10::toString(tb));
    const auto a = values({3, 4}, ta);
    const auto b = values({3, 4}, tb);
    const auto expected = a + b;
    EXPECT_EQ(expected.scalar_type(), c10::promoteTypes(ta, tb));
    EXPECT_TRUE(same(torchplug::add(a, b), expected));
  }
  // A 0-dim operand does not widen a tensor of the same category.
  const auto ints = values({4}, at::kInt);
  const auto half = values({4}, at::kHalf);
  EXPECT_TRUE(same(torchplug::add(ints, torch::tensor(2.5, torch::kDouble)),
                   ints + torch::tensor(2.5, torch::kDouble)));
  EXPECT_TRUE(same(torchplug::add(half, torch::tensor(0.1, torch::kDouble)),
                   half + torch::tensor(0.1, torch::kDouble)));
  const auto seven = torch::tensor(7, torch::kLong);
  EXPECT_TRUE(same(torchplug::add(half, seven), half + seven));
}

TEST(Add, NonContiguousInputs) {
  torch::manual_seed(3);
  for (auto dtype : {at::kBFloat16, at::kDouble, at::kLong}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto transposed = values({6, 4}, dtype).t();            // [4, 6]
    const auto strided = values({4, 12}, dtype).slice(1, 1, 12, 2);  // [4, 6]
    const auto expanded = values({4, 1}, dtype).expand({4, 6});   // stride 0
    ASSERT_FALSE(transposed.is_contiguous());
    ASSERT_FALSE(strided.is_contiguous());
    EXPECT_TRUE(same(torchplug::add(transposed, strided), transposed + strided));
    EXPECT_TRUE(same(torchplug::add(expanded, transposed), expanded + transposed));
  }
}

// Large enough for the CPU kernel to split the work between threads.
TEST(Add, LargeInputs) {
  torch::manual_seed(4);
  const auto a = values({300, 257}, at::kFloat);
  const auto b = values({257}, at::kFloat);
  EXPECT_TRUE(same(torchplug::add(a, b), a + b));
  EXPECT_TRUE(same(torchplug::add(a.t(), b.unsqueeze(1)), a.t() + b.unsqueeze(1)));
}

// Mixed dtypes in the layouts the kernels treat apart: each input is
// converted to the result dtype as it is read.
TEST(Add, MixedDtypesInEveryLayout) {
  torch::manual_seed(10);
  const std::vector<std::pair<at::ScalarType, at::ScalarType>> pairs = {
      {at::kBFloat16, at::kFloat}, {at::kInt, at::kFloat}, {at::kHalf, at::kFloat},
      {at::kByte, at::kChar}, {at::kLong, at::kHalf}};
  for (const auto& [ta, tb] : pairs) {
    SCOPED_TRACE(std::string(c10::toString(ta)) + " + " + c10::toString(tb));
    const std::vector<std::pair<at::Tensor, at::Tensor>> operands = {
        {values({67, 1}, ta), values({1, 131}, tb)},
        {values({50, 33}, ta), values({33}, tb)},
        {values({50, 33}, ta), values({50, 1}, tb)},
        {values({33, 50}, ta).t(), values({50, 33}, tb)},
        {values({1001}, ta).slice(0, 1), values({1000}, tb)}};
    for (const auto& [a, b] : operands) {
      EXPECT_TRUE(same(torchplug::add(a, b), a + b));
      EXPECT_TRUE(same(torchplug::add(b, a), b + a));
    }
  }
}

// ---------------------------------------------------------------- the CUDA kernel's plan

using torchplug::add_detail::FastDivider;
using torchplug::add_detail::row_layout;

template <typename index_t>
void expect_divides(index_t d, const std::vector<index_t>& numerators) {
  const FastDivider<index_t> divider(d);
  for (index_t n : numerators) {
    ASSERT_EQ(divider.div(n), n / d) << n << " / " << d;
  }
}

template <typename index_t>
void check_divider() {
  constexpr index_t kLimit = index_t{1} << (8 * sizeof(index_t) - 1);  // numerators below
  std::mt19937_64 random(16);
  std::vector<index_t> divisors = {1, 2, 3, 5, 7, 8, 640, 1000, 16384, 32771, 65537, kLimit - 1, kLimit};
  for (index_t p = 1; p != 0 && p <= kLimit; p <<= 1) {
    divisors.insert(divisors.end(), {p - 1 > 0 ? p - 1 : 1, p, p + 1});
  }
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + random() % kLimit);
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + random() % 100000);
  for (index_t d : divisors) {
    if (d == 0 || d > kLimit) continue;
    std::vector<index_t> numerators = {0, 1, kLimit - 1, kLimit - 2};
    for (index_t k : {index_t{1}, index_t{2}, index_t{3}, kLimit / d}) {
      if (k > 0 && k <= (kLimit - 1) / d) numerators.insert(numerators.end(), {k * d - 1, k * d, k * d + 1});
    }
    for (int i = 0; i < 50; ++i) numerators.push_back(random() % kLimit);
    for (auto& n : numerators) n = std::min(n, kLimit - 1);
    expect_divides(d, numerators);
  }
}

TEST(AddLayout, FastDividerIsExactBelowHalfTheRange) {
  check_divider<uint32_t>();
  check_divider<uint64_t>();
}

TEST(AddLayout, RowsMergeWhatBothInputsStepThroughAlike) {
  // Outer broadcast: two dimensions, a steps down the rows, b along them.
  auto layout = row_layout(kOp, {8192, 16384}, torch::empty({8192, 1}), torch::empty({1, 16384}));
  ASSERT_EQ(layout.ndim, 2);
  EXPECT_EQ(layout.sizes[0], 8192);
  EXPECT_EQ(layout.sizes[1], 16384);
  EXPECT_EQ(layout.strides[0][0], 1);
  EXPECT_EQ(layout.strides[0][1], 0);
  EXPECT_EQ(layout.strides[1][0], 0);
  EXPECT_EQ(layout.strides[1][1], 1);
  EXPECT_EQ(layout.rows(), 8192);
  EXPECT_EQ(layout.cols(), 16384);

  // Same shapes, contiguous: one row; size-1 dimensions dropped.
  layout = row_layout(kOp, {3, 1, 4, 5}, torch::empty({3, 1, 4, 5}), torch::empty({3, 1, 4, 5}));
  ASSERT_EQ(layout.ndim, 1);
  EXPECT_EQ(layout.cols(), 60);
  EXPECT_EQ(layout.strides[0][0], 1);
  EXPECT_EQ(layout.strides[1][0], 1);

  // Bias over [2, 3, F]: the two outer dimensions merge, the row does not.
  layout = row_layout(kOp, {2, 3, 7}, torch::empty({2, 3, 7}), torch::empty({7}));
  ASSERT_EQ(layout.ndim, 2);
  EXPECT_EQ(layout.sizes[0], 6);
  EXPECT_EQ(layout.strides[0][0], 7);
  EXPECT_EQ(layout.strides[1][0], 0);

  // A transposed input keeps its strides: [5, 4] viewed from [4, 5].
  layout = row_layout(kOp, {5, 4}, torch::empty({4, 5}).t(), torch::empty({5, 4}));
  ASSERT_EQ(layout.ndim, 2);
  EXPECT_EQ(layout.strides[0][0], 1);
  EXPECT_EQ(layout.strides[0][1], 5);
  EXPECT_EQ(layout.max_offset(0), 19);

  // Broadcast both ways over three dimensions; one element.
  layout = row_layout(kOp, {4, 3, 5}, torch::empty({4, 1, 5}), torch::empty({1, 3, 5}));
  EXPECT_EQ(layout.ndim, 3);
  layout = row_layout(kOp, {1, 1}, torch::empty({}), torch::empty({1, 1}));
  ASSERT_EQ(layout.ndim, 1);
  EXPECT_EQ(layout.cols(), 1);
}

// ---------------------------------------------------------------- autograd

// The reference gradient is libtorch's: grad_out summed back over the
// broadcast dimensions (expand, then sum).
TEST(AddAutograd, BroadcastGradientsSumBack) {
  torch::manual_seed(5);
  for (auto dtype : {at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto da = torch::randn({3, 1, 4}, dtype);
    const auto db = torch::randn({5, 4}, dtype);
    const auto weight = torch::randn({3, 5, 4}, dtype);

    const auto a = leaf(da);
    const auto b = leaf(db);
    const auto out = torchplug::add(a, b);
    ASSERT_TRUE(out.requires_grad());
    (out * weight).sum().backward();

    const auto ref_a = leaf(da);
    const auto ref_b = leaf(db);
    ((ref_a + ref_b) * weight).sum().backward();
    EXPECT_TRUE(same(a.grad(), ref_a.grad()));
    EXPECT_TRUE(same(b.grad(), ref_b.grad()));
    EXPECT_TRUE(same(a.grad(), weight.sum(1, true)));
  }
}

TEST(AddAutograd, GradientKeepsEachInputsDtype) {
  torch::manual_seed(6);
  const auto a = leaf(torch::randn({4}, torch::kFloat));
  const auto b = leaf(torch::randn({2, 4}, torch::kDouble));
  const auto weight = torch::randn({2, 4}, torch::kDouble);
  const auto out = torchplug::add(a, b);
  EXPECT_EQ(out.scalar_type(), at::kDouble);
  (out * weight).sum().backward();

  const auto ref_a = leaf(a);
  const auto ref_b = leaf(b);
  ((ref_a + ref_b) * weight).sum().backward();
  EXPECT_TRUE(same(a.grad(), ref_a.grad()));
  EXPECT_TRUE(same(b.grad(), ref_b.grad()));
}

TEST(AddAutograd, OnlyOneInputNeedsGradient) {
  torch::manual_seed(7);
  const auto a = leaf(torch::randn({3, 4}, torch::kDouble));
  const auto b = torch::randn({4}, torch::kDouble);
  const auto weight = torch::randn({3, 4}, torch::kDouble);
  (torchplug::add(b, a) * weight).sum().backward();
  EXPECT_TRUE(same(a.grad(), weight));
  EXPECT_FALSE(b.grad().defined());
}

// The backward is built from differentiable ops, so it can be differentiated again.
TEST(AddAutograd, DoubleBackward) {
  torch::manual_seed(8);
  const auto a = leaf(torch::randn({3, 1}, torch::kDouble));
  const auto b = leaf(torch::randn({1, 4}, torch::kDouble));
  const auto weight = leaf(torch::randn({3, 4}, torch::kDouble));
  const auto v = torch::randn({3, 1}, torch::kDouble);
  const auto loss = (torchplug::add(a, b) * weight).sum();
  const auto grad_a = torch::autograd::grad({loss}, {a}, {}, true, true)[0];
  (grad_a * v).sum().backward();
  EXPECT_TRUE(same(weight.grad(), v.expand({3, 4})));
}

// ---------------------------------------------------------------- errors

TEST(AddErrors, ShapesMustBroadcast) {
  const auto a = torch::randn({3});
  const auto b = torch::randn({2, 4});
  EXPECT_TRUE(throws_with([&] { torchplug::add(a, b); }, {kOp, "'a'", "'b'"}));
  EXPECT_TRUE(throws_with([&] { torchplug::add(leaf(a), b); }, {kOp, "'a'", "'b'"}));
}

TEST(AddErrors, UnsupportedDtypes) {
  const auto ok = torch::randn({3});
  const auto flags = torch::ones({3}, torch::kBool);
  const auto complex = torch::randn({3}, torch::kComplexFloat);
  EXPECT_TRUE(throws_with([&] { torchplug::add(flags, ok); }, {kOp, "'a'", "Bool"}));
  EXPECT_TRUE(throws_with([&] { torchplug::add(ok, complex); }, {kOp, "'b'", "ComplexFloat"}));
}

// ---------------------------------------------------------------- CUDA

bool has_cuda_kernel() {
  const auto info = torchplug::core::Registry::instance().find("add");
  return info && std::count(info->backends.begin(), info->backends.end(), "CUDA") > 0;
}

TEST(AddCuda, MatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!has_cuda_kernel()) GTEST_SKIP() << "torchplug built without CUDA kernels";
  torch::manual_seed(9);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto a = values({1000, 33}, dtype);
    const auto b = values({33}, dtype);
    const auto c = values({1000, 1}, dtype);
    EXPECT_TRUE(same(torchplug::add(a.cuda(), b.cuda()).cpu(), torchplug::add(a, b)));
    EXPECT_TRUE(same(torchplug::add(a.cuda().t(), c.cuda().t()).cpu(),
                     torchplug::add(a.t(), c.t())));
    const auto h = values({1000, 33}, at::kHalf);
    EXPECT_TRUE(same(torchplug::add(a.cuda(), h.cuda()).cpu(), torchplug::add(a, h)));
  }

  const auto x = leaf(torch::randn({8, 1}).cuda());
  const auto y = leaf(torch::randn({1, 5}).cuda());
  (torchplug::add(x, y) * 2).sum().backward();
  EXPECT_TRUE(same(x.grad().cpu(), torch::full({8, 1}, 10.0f)));
  EXPECT_TRUE(same(y.grad().cpu(), torch::full({1, 5}, 16.0f)));
}

}  // namespace
