// GoogleTest suite for torchplug::scatter_sum, through the public C++ API.
//
// References come from plain libtorch on the same inputs: index_add_ for a 1-D
// index, scatter_add_ with the index expanded by hand for any other shape.
// Layout tests use small integer values, whose sums are exact in every dtype
// (|sum| stays far below 256, the largest range of consecutive integers
// bfloat16 holds), so the results must match bit for bit. Rounding is tested
// separately against a float64 reference with a derived error bound.

#include <torchplug/core/registry.h>
#include <torchplug/ops/scatter.h>

#include "torchplug_testing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

using torchplug::scatter_sum;

const std::vector<at::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat,
                                             at::kDouble, at::kInt,      at::kLong};

using torchplug::testing::leaf;
using torchplug::testing::same;
using torchplug::testing::throws_with;

// Small integers as `dtype` (see the top of the file).
at::Tensor values(at::IntArrayRef sizes, at::ScalarType dtype) {
  return torch::randint(-3, 4, sizes, torch::kDouble).to(dtype);
}

at::Tensor indices(at::IntArrayRef sizes, int64_t n) {
  return torch::randint(0, n, sizes, torch::kLong);
}

std::vector<int64_t> sizes_with(const at::Tensor& t, int64_t dim, int64_t n) {
  auto sizes = t.sizes().vec();
  sizes[dim < 0 ? dim + t.dim() : dim] = n;
  return sizes;
}

// The reference for a 1-D index.
at::Tensor ref_1d(const at::Tensor& src, const at::Tensor& index, int64_t dim, int64_t n) {
  return torch::zeros(sizes_with(src, dim, n), src.options()).index_add_(dim, index, src);
}

// The reference for an index already of src's shape.
at::Tensor ref_full(const at::Tensor& src, const at::Tensor& index, int64_t dim, int64_t n) {
  return torch::zeros(sizes_with(src, dim, n), src.options()).scatter_add_(dim, index, src);
}

// The exact sums of `src` (index of src's shape) in float64, added to `initial`
// when given, and how far from them a result may be when it was accumulated in
// float32 and rounded once to src's dtype. Summing n terms in float32, in any
// order, errs by at most (n - 1) * 2^-24 * sum|x| (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed., section 4.2; n in place of n - 1
// covers the second-order term). Rounding to the output adds half an ulp:
// u * |sum| with u = 2^-11 for float16 and 2^-8 for bfloat16, plus 2^-25 for
// float16's subnormal spacing.
struct Exact {
  at::Tensor sum;
  at::Tensor bound;
};

Exact exact_sums(const at::Tensor& src, const at::Tensor& index, int64_t dim, int64_t n,
                 const at::Tensor& initial = {}) {
  const auto x = src.to(torch::kDouble);
  const auto zeros = torch::zeros(sizes_with(x, dim, n), x.options());
  const auto start = initial.defined() ? initial.to(torch::kDouble) : zeros;
  const auto sum = start.clone().scatter_add_(dim, index, x);
  const auto abs_sum = start.abs().scatter_add_(dim, index, x.abs());
  const auto terms = initial.defined() ? zeros + 1 : zeros.clone();
  const auto count = terms.scatter_add_(dim, index, torch::ones_like(x));
  const auto dtype = src.scalar_type();
  const double u = dtype == at::kHalf ? std::ldexp(1.0, -11)
                   : dtype == at::kBFloat16 ? std::ldexp(1.0, -8)
                                            : 0.0;
  const double subnormal = dtype == at::kHalf ? std::ldexp(1.0, -25) : 0.0;
  const auto bound = count * std::ldexp(1.0, -24) * abs_sum * (1 + u) + u * sum.abs() + subnormal;
  return {sum, bound};
}

::testing::AssertionResult within(const at::Tensor& actual, const at::Tensor& expected,
                                  const at::Tensor& bound) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "got shape " << actual.sizes() << ", expected "
                                         << expected.sizes();
  }
  const auto error = (actual.cpu().to(torch::kDouble) - expected).abs();
  if ((error <= bound).all().item<bool>()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "largest error " << error.max().item<double>()
                                       << " over the bound; got:\n" << actual
                                       << "\nexpected:\n" << expected;
}

int64_t max_plus_one(const at::Tensor& index) {
  return index.numel() == 0 ? 0 : index.max().item<int64_t>() + 1;
}

// ---------------------------------------------------------------- forward

TEST(ScatterSum, OneDimensional) {
  torch::manual_seed(0);
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = values({10}, dtype);
    const auto index = indices({10}, 6);
    const auto expected = ref_1d(src, index, 0, max_plus_one(index));
    EXPECT_TRUE(same(scatter_sum(src, index), expected));
    EXPECT_TRUE(same(scatter_sum(src, index, 0), expected));
  }
}

TEST(ScatterSum, AlongEachDimensionIncludingNegative) {
  torch::manual_seed(1);
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = values({4, 5, 6}, dtype);
    for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
      SCOPED_TRACE("dim " + std::to_string(dim));
      const auto index = indices({src.size(dim)}, 3);
      EXPECT_TRUE(same(scatter_sum(src, index, dim, std::nullopt, 3), ref_1d(src, index, dim, 3)));
    }
  }
}

TEST(ScatterSum, Empty) {
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto none = torch::empty({0}, torch::kLong);
    EXPECT_TRUE(same(scatter_sum(values({0}, dtype), none), torch::zeros({0}, dtype)));
    EXPECT_TRUE(same(scatter_sum(values({0, 3}, dtype), none, 0, std::nullopt, 4),
                     torch::zeros({4, 3}, dtype)));
    EXPECT_TRUE(same(scatter_sum(values({2, 0, 3}, dtype), none, 1),
                     torch::zeros({2, 0, 3}, dtype)));
    // No columns: no index value lands anywhere, so the default dim_size is 0
    // (torch_scatter's rule: the maximum is taken over the index broadcast to src).
    const auto index = torch::tensor({2, 0, 2}, torch::kLong);
    EXPECT_TRUE(same(scatter_sum(values({3, 0}, dtype), index, 0), torch::zeros({0, 0}, dtype)));
    EXPECT_TRUE(same(scatter_sum(values({3, 0}, dtype), index, 0, std::nullopt, 5),
                     torch::zeros({5, 0}, dtype)));

    auto out = values({4, 3}, dtype);
    const auto before = out.clone();
    scatter_sum(values({0, 3}, dtype), none, 0, out);
    EXPECT_TRUE(same(out, before));
  }
}

TEST(ScatterSum, NonContiguousInputs) {
  torch::manual_seed(2);
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto transposed = values({6, 5}, dtype).t();  // [5, 6]
    ASSERT_FALSE(transposed.is_contiguous());
    const auto index = indices({6}, 4);
    EXPECT_TRUE(same(scatter_sum(transposed, index, 1, std::nullopt, 4),
                     ref_1d(transposed.contiguous(), index, 1, 4)));

    const auto strided = values({8, 10}, dtype).slice(1, 0, 10, 2);  // [8, 5]
    const auto strided_index = indices({16}, 5).slice(0, 1, 16, 2);  // [8]
    ASSERT_FALSE(strided.is_contiguous());
    EXPECT_TRUE(same(scatter_sum(strided, strided_index, 0, std::nullopt, 5),
                     ref_1d(strided.contiguous(), strided_index.contiguous(), 0, 5)));

    // A full index that is itself a transposed view.
    const auto full_index = indices({6, 5}, 3).t();  // [5, 6]
    EXPECT_TRUE(same(scatter_sum(transposed, full_index, 1, std::nullopt, 3),
                     ref_full(transposed.contiguous(), full_index.contiguous(), 1, 3)));
  }
}

TEST(ScatterSum, BroadcastIndex) {
  torch::manual_seed(3);
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = values({4, 5, 6}, dtype);

    // Same shape as src.
    const auto full = indices({4, 5, 6}, 3);
    EXPECT_TRUE(same(scatter_sum(src, full, 1), ref_full(src, full, 1, max_plus_one(full))));

    // Missing trailing dimensions are added.
    const auto leading = indices({4, 5}, 3);
    EXPECT_TRUE(same(scatter_sum(src, leading, 1, std::nullopt, 3),
                     ref_full(src, leading.unsqueeze(-1).expand({4, 5, 6}).contiguous(), 1, 3)));

    // Size-1 dimensions are expanded.
    const auto middle = indices({4, 1, 6}, 3);
    EXPECT_TRUE(same(scatter_sum(src, middle, -1, std::nullopt, 3),
                     ref_full(src, middle.expand({4, 5, 6}).contiguous(), -1, 3)));

    // A column index [E, 1] for src [E, F] is the 1-D case in disguise.
    const auto rows = values({6, 4}, dtype);
    const auto column = indices({6, 1}, 3);
    EXPECT_TRUE(same(scatter_sum(rows, column, 0, std::nullopt, 3),
                     ref_1d(rows, column.view({6}), 0, 3)));
  }
}

TEST(ScatterSum, DimSizeLargerThanMaxIndex) {
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = values({5, 3}, dtype);
    const auto index = torch::tensor({0, 2, 2, 1, 0}, torch::kLong);
    const auto result = scatter_sum(src, index, 0, std::nullopt, 7);
    EXPECT_TRUE(same(result, ref_1d(src, index, 0, 7)));
    EXPECT_TRUE(same(result.slice(0, 3), torch::zeros({4, 3}, dtype)));
  }
}

TEST(ScatterSum, OutAccumulatesInPlace) {
  torch::manual_seed(4);
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = values({6, 3}, dtype);
    const auto index = indices({6}, 4);
    auto out = values({4, 3}, dtype);
    const auto expected = out.clone().index_add_(0, index, src);
    const auto result = scatter_sum(src, index, 0, out);
    EXPECT_TRUE(same(out, expected));
    EXPECT_TRUE(result.is_same(out));
    EXPECT_EQ(result.data_ptr(), out.data_ptr());

    // dim_size may be given when it agrees with out; a full index works too.
    const auto full = indices({6, 3}, 4);
    const auto expected_full = out.clone().scatter_add_(-2, full, src);
    scatter_sum(src, full, -2, out, 4);
    EXPECT_TRUE(same(out, expected_full));
  }
}

TEST(ScatterSum, NonContiguousOutIsWritten) {
  torch::manual_seed(5);
  for (auto dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = values({6, 3}, dtype);
    const auto index = indices({6}, 8);

    auto base = values({3, 8}, dtype);
    auto out = base.t();  // [8, 3]
    ASSERT_FALSE(out.is_contiguous());
    const auto expected = out.clone().index_add_(0, index, src);
    const auto result = scatter_sum(src, index, 0, out);
    EXPECT_TRUE(same(base.t(), expected));
    EXPECT_EQ(result.data_ptr(), base.data_ptr());

    // Every other column of a wider tensor: the columns between stay as they were.
    auto wide = values({8, 6}, dtype);
    const auto wide_before = wide.clone();
    auto every_other = wide.slice(1, 0, 6, 2);
    scatter_sum(src, index, 0, every_other);
    EXPECT_TRUE(same(wide.slice(1, 0, 6, 2),
                     wide_before.slice(1, 0, 6, 2).index_add(0, index, src)));
    EXPECT_TRUE(same(wide.slice(1, 1, 6, 2), wide_before.slice(1, 1, 6, 2)));
  }
}

// Large enough for the CPU kernels to split the work between threads.
TEST(ScatterSum, LargeInputsAcrossThreads) {
  torch::manual_seed(6);
  for (auto dtype : {at::kFloat, at::kLong}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = values({300, 200}, dtype);
    // Few output rows (each thread may sum into its own copy) and many, in
    // random order and sorted. With 250 rows: float rows of 800 bytes take
    // column slices when random and ranges of output rows when sorted; int64
    // rows of 1600 bytes take ranges either way.
    for (int64_t n : {50, 250}) {
      const auto rows = indices({300}, n);
      EXPECT_TRUE(same(scatter_sum(src, rows, 0, std::nullopt, n), ref_1d(src, rows, 0, n)));
      const auto sorted = std::get<0>(rows.sort());
      EXPECT_TRUE(same(scatter_sum(src, sorted, 0, std::nullopt, n), ref_1d(src, sorted, 0, n)));
    }
    const auto middle = values({4, 300, 50}, dtype);
    const auto middle_rows = indices({300}, 40);
    EXPECT_TRUE(same(scatter_sum(middle, middle_rows, 1, std::nullopt, 40),
                     ref_1d(middle, middle_rows, 1, 40)));
    const auto full = indices({300, 200}, 50);
    EXPECT_TRUE(same(scatter_sum(src, full, 0, std::nullopt, 50), ref_full(src, full, 0, 50)));
    EXPECT_TRUE(same(scatter_sum(src, full, 1, std::nullopt, 50), ref_full(src, full, 1, 50)));
  }
}

// 1 followed by 64 halves of float16's (bfloat16's) ulp at 1: adding them one
// at a time in the narrow type leaves 1 (every step is a tie, rounded to even);
// accumulated in float32 the sum, 1 + 2^-5 (1 + 2^-2), is exact in the output.
TEST(ScatterSum, HalfTypesAccumulateInFloat) {
  for (auto [dtype, step, expected] : {std::tuple{at::kHalf, std::ldexp(1.0, -11), 1.03125},
                                       std::tuple{at::kBFloat16, std::ldexp(1.0, -8), 1.25}}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto src = torch::full({65}, step, dtype);
    src[0] = 1.0;
    const auto index = torch::zeros({65}, torch::kLong);
    EXPECT_EQ(scatter_sum(src, index).item<double>(), expected);

    auto out = torch::ones({1}, dtype);
    scatter_sum(src.slice(0, 1), index.slice(0, 1), 0, out);
    EXPECT_EQ(out.item<double>(), expected);
  }
}

TEST(ScatterSum, RandomValuesWithinFloat32Bound) {
  torch::manual_seed(7);
  for (auto dtype : {at::kHalf, at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto src = torch::randn({200, 8}).to(dtype);
    const auto index = indices({200}, 10);
    const auto exact = exact_sums(src, index.unsqueeze(1).expand({200, 8}).contiguous(), 0, 10);
    EXPECT_TRUE(within(scatter_sum(src, index, 0, std::nullopt, 10), exact.sum, exact.bound));

    const auto full = indices({200, 8}, 10);
    const auto exact_full = exact_sums(src, full, 0, 10);
    EXPECT_TRUE(within(scatter_sum(src, full, 0, std::nullopt, 10), exact_full.sum,
                       exact_full.bound));

    // out= adds one more term, then rounds once.
    const auto out = torch::randn({10, 8}).to(dtype);
    const auto exact_out = exact_sums(src, full, 0, 10, out);
    scatter_sum(src, full, 0, out);
    EXPECT_TRUE(within(out, exact_out.sum, exact_out.bound));
  }
}

// ---------------------------------------------------------------- autograd

TEST(ScatterSumAutograd, GradientMatchesIndexAdd) {
  torch::manual_seed(8);
  for (auto dtype : {at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto data = torch::randn({5, 4, 3}, dtype);
    const auto index = indices({4}, 6);
    const auto weight = torch::randn({5, 6, 3}, dtype);

    const auto src = leaf(data);
    const auto out = scatter_sum(src, index, -2, std::nullopt, 6);
    ASSERT_TRUE(out.requires_grad());
    (out * weight).sum().backward();

    const auto ref_src = leaf(data);
    (torch::zeros({5, 6, 3}, dtype).index_add(1, index, ref_src) * weight).sum().backward();
    EXPECT_TRUE(same(src.grad(), ref_src.grad()));
  }
}

TEST(ScatterSumAutograd, GradientWithBroadcastIndex) {
  torch::manual_seed(9);
  const auto data = torch::randn({5, 4, 3}, torch::kDouble);
  const auto weight = torch::randn({5, 3, 3}, torch::kDouble);
  for (const auto& index : {indices({5, 4}, 3), indices({5, 4, 3}, 3), indices({1, 4, 1}, 3)}) {
    SCOPED_TRACE(::testing::PrintToString(index.sizes()));
    const auto src = leaf(data);
    (scatter_sum(src, index, 1, std::nullopt, 3) * weight).sum().backward();

    const auto full = (index.dim() == 2 ? index.unsqueeze(-1) : index).expand({5, 4, 3});
    const auto ref_src = leaf(data);
    (torch::zeros({5, 3, 3}, torch::kDouble).scatter_add(1, full, ref_src) * weight)
        .sum()
        .backward();
    EXPECT_TRUE(same(src.grad(), ref_src.grad()));
  }
}

TEST(ScatterSumAutograd, OutReceivesGradientToo) {
  torch::manual_seed(10);
  const auto data = torch::randn({6, 3}, torch::kDouble);
  const auto initial = torch::randn({4, 3}, torch::kDouble);
  const auto weight = torch::randn({4, 3}, torch::kDouble);
  const auto index = indices({6}, 4);

  const auto src = leaf(data);
  const auto base = leaf(initial);
  auto out = base * 1;  // not a leaf, so it may be written in place
  scatter_sum(src, index, 0, out);
  (out * weight).sum().backward();

  const auto ref_src = leaf(data);
  const auto ref_base = leaf(initial);
  ((ref_base * 1).index_add_(0, index, ref_src) * weight).sum().backward();
  EXPECT_TRUE(same(src.grad(), ref_src.grad()));
  EXPECT_TRUE(same(base.grad(), ref_base.grad()));

  // An out that needs no gradient starts to need one when src does.
  auto zeros = torch::zeros({4, 3}, torch::kDouble);
  const auto src2 = leaf(data);
  scatter_sum(src2, index, 0, zeros);
  ASSERT_TRUE(zeros.requires_grad());
  (zeros * weight).sum().backward();
  EXPECT_TRUE(same(src2.grad(), ref_src.grad()));
}

// out= through a transposed view: the gradient flows back to the view's base.
TEST(ScatterSumAutograd, NonContiguousOutView) {
  torch::manual_seed(12);
  const auto data = torch::randn({6, 3}, torch::kDouble);
  const auto initial = torch::randn({3, 4}, torch::kDouble);
  const auto weight = torch::randn({3, 4}, torch::kDouble);
  const auto index = indices({6}, 4);

  const auto src = leaf(data);
  const auto base = leaf(initial);
  const auto work = base * 1;
  auto out = work.t();  // [4, 3]
  scatter_sum(src, index, 0, out);
  (work * weight).sum().backward();

  const auto ref_src = leaf(data);
  const auto ref_base = leaf(initial);
  const auto ref_work = ref_base * 1;
  ref_work.t().index_add_(0, index, ref_src);
  (ref_work * weight).sum().backward();
  EXPECT_TRUE(same(work, ref_work));
  EXPECT_TRUE(same(src.grad(), ref_src.grad()));
  EXPECT_TRUE(same(base.grad(), ref_base.grad()));
}

// Writing into out bumps its version once, so autograd refuses a backward
// through a value that out held before: also when nothing in the call requires
// grad and the op skips autograd's node.
TEST(ScatterSumAutograd, InPlaceWriteIsSeenByAutograd) {
  const auto index = torch::tensor({0, 1, 1}, torch::kLong);
  auto out = torch::zeros({2});
  const auto weighted = leaf(torch::ones({2})) * out;  // saves out for backward
  const auto version = out._version();
  scatter_sum(torch::ones({3}), index, 0, out);
  EXPECT_EQ(out._version(), version + 1);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(throws_with([&] { weighted.sum().backward(); }, {"modified by an inplace operation"}));

  auto work = leaf(torch::ones({2})) * 1;
  const auto squared = work * work;  // saves work for backward
  scatter_sum(torch::ones({3}), index, 0, work);
  EXPECT_TRUE(throws_with([&] { squared.sum().backward(); }, {"modified by an inplace operation"}));
}

// The backward is built from differentiable ops, so it can be differentiated again:
// the gradient of <grad_src, v> with respect to the weight is v scattered.
TEST(ScatterSumAutograd, DoubleBackward) {
  torch::manual_seed(11);
  const auto data = torch::randn({6, 3}, torch::kDouble);
  const auto index = indices({6}, 4);
  const auto v = torch::randn({6, 3}, torch::kDouble);

  const auto src = leaf(data);
  const auto weight = leaf(torch::randn({4, 3}, torch::kDouble));
  const auto out = scatter_sum(src, index, 0, std::nullopt, 4);
  const auto grad_src = torch::autograd::grad({(out * weight).sum()}, {src}, {}, true, true)[0];
  (grad_src * v).sum().backward();
  EXPECT_TRUE(same(weight.grad(), ref_1d(v, index, 0, 4)));
}

// ---------------------------------------------------------------- errors

constexpr const char* kOp = "torchplug::scatter_sum";

TEST(ScatterSumErrors, IndexMustBeInt64) {
  const auto src = torch::randn({4, 3});
  for (auto dtype : {at::kFloat, at::kInt}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto index = torch::zeros({4}, dtype);
    EXPECT_TRUE(throws_with([&] { scatter_sum(src, index, 0); }, {kOp, "'index'", "int64"}));
    // The autograd path checks the same way.
    EXPECT_TRUE(throws_with([&] { scatter_sum(leaf(src), index, 0); }, {kOp, "'index'"}));
  }
}

TEST(ScatterSumErrors, IndexShapeMustBroadcast) {
  const auto src = torch::randn({4, 5});
  for (const auto& index : {torch::zeros({4, 3}, torch::kLong), torch::zeros({3}, torch::kLong),
                            torch::zeros({4, 5, 1}, torch::kLong)}) {
    SCOPED_TRACE(::testing::PrintToString(index.sizes()));
    EXPECT_TRUE(throws_with([&] { scatter_sum(src, index, 0); }, {kOp, "'index'"}));
  }
}

TEST(ScatterSumErrors, IndexOutOfRange) {
  const auto src = torch::randn({3, 2});
  const auto negative = torch::tensor({0, -1, 1}, torch::kLong);
  EXPECT_TRUE(throws_with<c10::IndexError>([&] { scatter_sum(src, negative, 0); },
                                           {kOp, "'index'", "-1"}));
  EXPECT_TRUE(throws_with<c10::IndexError>(
      [&] { scatter_sum(src, negative, 0, std::nullopt, 5); }, {kOp, "'index'"}));

  const auto large = torch::tensor({0, 3, 1}, torch::kLong);
  EXPECT_TRUE(throws_with<c10::IndexError>([&] { scatter_sum(src, large, 0, std::nullopt, 3); },
                                           {kOp, "'index'", "3"}));

  // out= too small for the index: nothing is written.
  auto out = torch::randn({3, 2});
  const auto before = out.clone();
  EXPECT_TRUE(throws_with<c10::IndexError>([&] { scatter_sum(src, large, 0, out); },
                                           {kOp, "'index'"}));
  EXPECT_TRUE(same(out, before));
}

TEST(ScatterSumErrors, OutMustMatch) {
  const auto src = torch::randn({6, 3});
  const auto index = torch::zeros({6}, torch::kLong);
  for (const auto& out : {torch::zeros({4, 4}), torch::zeros({4}), torch::zeros({4, 3, 1}),
                          torch::zeros({4, 3}, torch::kDouble)}) {
    SCOPED_TRACE(::testing::PrintToString(out.sizes()) + c10::toString(out.scalar_type()));
    auto target = out;
    EXPECT_TRUE(throws_with([&] { scatter_sum(src, index, 0, target); }, {kOp, "'out'"}));
  }
  auto out = torch::zeros({4, 3});
  EXPECT_TRUE(throws_with([&] { scatter_sum(src, index, 0, out, 5); }, {kOp, "'dim_size'"}));
}

TEST(ScatterSumErrors, OutMustNotShareMemory) {
  auto x = torch::randn({6, 3});
  const auto index = torch::tensor({5, 4, 3, 2, 1, 0}, torch::kLong);
  EXPECT_TRUE(throws_with([&] { scatter_sum(x, index, 0, x); }, {kOp, "'out'", "'src'"}));
  auto storage = torch::zeros({10}, torch::kLong);
  const auto ones = torch::ones({6}, torch::kLong);
  auto overlapping = storage.narrow(0, 4, 6);
  EXPECT_TRUE(throws_with([&] { scatter_sum(ones, storage.narrow(0, 0, 6), 0, overlapping); },
                          {kOp, "'out'", "'index'"}));
  auto expanded = torch::zeros({1, 3}).expand({6, 3});
  EXPECT_TRUE(throws_with([&] { scatter_sum(x, index, 0, expanded); }, {kOp, "'out'"}));
}

TEST(ScatterSumErrors, OtherArguments) {
  const auto index = torch::zeros({4}, torch::kLong);
  EXPECT_TRUE(throws_with<c10::IndexError>([&] { scatter_sum(torch::randn({4, 3}), index, 2); },
                                           {kOp, "'dim'"}));
  EXPECT_TRUE(throws_with([&] { scatter_sum(torch::zeros({4}, torch::kBool), index, 0); },
                          {kOp, "'src'"}));
  EXPECT_TRUE(throws_with([&] { scatter_sum(torch::zeros({4}, torch::kUInt8), index, 0); },
                          {kOp, "'src'"}));
  EXPECT_TRUE(throws_with([&] { scatter_sum(torch::tensor(1.0), index.slice(0, 0, 1), 0); },
                          {kOp, "'src'"}));
  EXPECT_TRUE(throws_with([&] { scatter_sum(torch::randn({4}), index, 0, std::nullopt, -1); },
                          {kOp, "'dim_size'"}));
}

// ---------------------------------------------------------------- CUDA

bool has_cuda_kernel() {
  const auto info = torchplug::core::Registry::instance().find("scatter_sum");
  return info && std::count(info->backends.begin(), info->backends.end(), "CUDA") > 0;
}

TEST(ScatterSumCuda, MatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!has_cuda_kernel()) GTEST_SKIP() << "torchplug built without CUDA kernels";
  torch::manual_seed(13);
  const int64_t n = 50;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (bool sorted : {false, true}) {
      // Rows of 33 values go to the atomic rows with 1000 entries and to the
      // CSR with 70000 (more than 2^21 elements); rows of 16 values with 140000
      // to the atomic rows in float and to the CSR in bfloat16; rows of 12
      // (three column vectors, no hot row) with 140000 to the CSR in both,
      // whose narrow rows take the atomic rows there when unsorted; rows of 256
      // (64 column vectors in float, each lane of a warp on its own) to the
      // atomic rows.
      for (const auto& sizes :
           {std::vector<int64_t>{1000}, std::vector<int64_t>{1000, 33}, std::vector<int64_t>{70000, 33},
            std::vector<int64_t>{140000, 16}, std::vector<int64_t>{140000, 12},
            std::vector<int64_t>{3000, 256}}) {
        for (bool index_1d : {true, false}) {
          SCOPED_TRACE(std::string(c10::toString(dtype)) + (sorted ? " sorted" : " random") +
                       (index_1d ? " 1-D index " : " full index ") +
                       ::testing::PrintToString(sizes));
          const auto src = torch::randn(sizes).to(dtype);
          auto index = index_1d ? indices({sizes[0]}, n) : indices(sizes, n);
          if (sorted) index = std::get<0>(index.sort(0));
          const auto full = index_1d && sizes.size() == 2
                                ? index.unsqueeze(1).expand(sizes).contiguous()
                                : index;
          const auto exact = exact_sums(src, full, 0, n);

          const auto cpu = scatter_sum(src, index, 0, std::nullopt, n);
          const auto cuda = scatter_sum(src.cuda(), index.cuda(), 0, std::nullopt, n);
          ASSERT_TRUE(cuda.is_cuda());
          EXPECT_EQ(cuda.scalar_type(), dtype);
          // Each is within the bound of the exact sum, so of each other within twice it.
          EXPECT_TRUE(within(cuda, cpu.to(torch::kDouble), exact.bound * 2));
          EXPECT_TRUE(within(cuda, exact.sum, exact.bound));

          auto out = torch::randn(sizes_with(src, 0, n)).to(dtype);
          auto out_cuda = out.cuda();
          const auto exact_out = exact_sums(src, full, 0, n, out);
          scatter_sum(src, index, 0, out);
          scatter_sum(src.cuda(), index.cuda(), 0, out_cuda);
          EXPECT_TRUE(within(out_cuda, out.to(torch::kDouble), exact_out.bound * 2));
          EXPECT_TRUE(within(out_cuda, exact_out.sum, exact_out.bound));
        }
      }
    }
  }
}

}  // namespace
