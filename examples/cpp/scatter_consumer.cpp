// A libtorch program using torchplug's scatter plugin alone: one round of
// message passing on a small graph, forward and backward through autograd,
// checked against plain loops.

#include <torchplug/ops/scatter.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

constexpr int64_t kNodes = 5;
constexpr int64_t kFeatures = 3;

// Directed edges source -> target. Node 4 receives nothing; node 1 receives three.
const std::vector<int64_t> kSource = {0, 1, 1, 2, 3, 3, 4};
const std::vector<int64_t> kTarget = {1, 0, 2, 1, 1, 2, 3};

using Table = std::vector<std::vector<double>>;

Table table(const at::Tensor& t) {
  const auto data = t.detach();
  const auto values = data.accessor<double, 2>();
  Table rows(values.size(0), std::vector<double>(values.size(1)));
  for (int64_t i = 0; i < values.size(0); ++i) {
    for (int64_t j = 0; j < values.size(1); ++j) rows[i][j] = values[i][j];
  }
  return rows;
}

// Prints `name`'s rows and returns whether they match `expected`.
bool check(const char* name, const at::Tensor& actual, const Table& expected) {
  const Table got = table(actual);
  std::printf("%s:\n", name);
  bool ok = got.size() == expected.size();
  for (size_t i = 0; i < got.size() && i < expected.size(); ++i) {
    std::printf("  node %zu:", i);
    for (size_t j = 0; j < got[i].size(); ++j) {
      const bool match = std::abs(got[i][j] - expected[i][j]) <= 1e-12;
      ok = ok && match;
      std::printf(" %8.4f", got[i][j]);
      if (!match) std::printf(" (expected %.4f)", expected[i][j]);
    }
    std::printf("\n");
  }
  std::printf("  %s the reference loop\n", ok ? "matches" : "DOES NOT MATCH");
  return ok;
}

}  // namespace

int main() {
  const auto source = torch::tensor(kSource, torch::kLong);
  const auto target = torch::tensor(kTarget, torch::kLong);
  const auto x = (torch::arange(kNodes * kFeatures, torch::kDouble).view({kNodes, kFeatures}) / 4)
                     .requires_grad_(true);
  const auto weight = torch::linspace(-1.0, 1.0, kNodes * kFeatures, torch::kDouble)
                          .view({kNodes, kFeatures});

  // Each node sums the features of the nodes pointing at it.
  const auto messages = x.index_select(0, source);
  const auto h = torchplug::scatter_sum(messages, target, 0, std::nullopt, kNodes);
  (h * weight).sum().backward();

  // The same, by hand: h[t] += x[s] for every edge s -> t, and the gradient of
  // sum(h * weight) with respect to x[s] collects weight[t] for every such edge.
  const Table xs = table(x);
  const Table ws = table(weight);
  Table h_ref(kNodes, std::vector<double>(kFeatures, 0.0));
  Table grad_ref(kNodes, std::vector<double>(kFeatures, 0.0));
  for (size_t e = 0; e < kSource.size(); ++e) {
    for (int64_t f = 0; f < kFeatures; ++f) {
      h_ref[kTarget[e]][f] += xs[kSource[e]][f];
      grad_ref[kSource[e]][f] += ws[kTarget[e]][f];
    }
  }

  std::printf("scatter_sum over %zu edges into %lld nodes\n", kSource.size(),
              static_cast<long long>(kNodes));
  const bool forward_ok = check("forward h = scatter_sum(x[source], target)", h, h_ref);
  const bool backward_ok = check("backward d sum(h * weight) / dx", x.grad(), grad_ref);
  std::printf("%s\n", forward_ok && backward_ok ? "OK" : "FAILED");
  return forward_ok && backward_ok ? 0 : 1;
}
