// GoogleTest suite for the sampler, through the public C++ API (sampler.h).
//
// A 6-node graph whose neighbourhoods are known: whole-neighbourhood sampling
// and subgraphs against hand-written results, walks that have one choice per
// step, the same generator seed giving the same random results, and errors
// that name the op and the argument. Under the sanitizers this also covers
// the CPU kernels' hash table and parallel passes.

#include <torchplug/ops/sampler.h>

#include "torchplug_testing.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace {

using torchplug::testing::same;
using torchplug::testing::throws_with;

// 0 -> 1, 2;  1 -> 2;  2 -> 0, 3;  3 -> (none);  4 -> 5;  5 -> 4
struct Graph {
  at::Tensor rowptr = torch::tensor({0, 2, 3, 5, 5, 6, 7}, torch::kLong);
  at::Tensor col = torch::tensor({1, 2, 2, 0, 3, 5, 4}, torch::kLong);
};

at::Tensor longs(std::vector<int64_t> values) { return torch::tensor(values, torch::kLong); }

TEST(NeighborSample, WholeNeighbourhoodsRelabelledInDiscoveryOrder) {
  const Graph g;
  const auto s = torchplug::neighbor_sample(g.rowptr, g.col, longs({0}), {-1, -1});
  // Hop 1 from 0: edges 0, 1 reach 1, 2. Hop 2 from 1: edge 2 (to 2, known); from 2: edges 3 (to 0), 4 (to 3).
  EXPECT_TRUE(same(s.node_id, longs({0, 1, 2, 3})));
  EXPECT_TRUE(same(s.row, longs({0, 0, 1, 2, 2})));
  EXPECT_TRUE(same(s.col, longs({1, 2, 2, 0, 3})));
  ASSERT_TRUE(s.edge_id.has_value());
  EXPECT_TRUE(same(*s.edge_id, longs({0, 1, 2, 3, 4})));
  EXPECT_EQ(s.num_sampled_nodes_per_hop, (std::vector<int64_t>{1, 2, 1}));
  EXPECT_EQ(s.num_sampled_edges_per_hop, (std::vector<int64_t>{2, 3}));
}

TEST(NeighborSample, CscSwapsAndDisjointTreesKeepTheirOwnNodes) {
  const Graph g;
  torchplug::NeighborSampleOptions o;
  o.csc = true;
  o.disjoint = true;
  const auto s = torchplug::neighbor_sample(g.rowptr, g.col, longs({4, 5}), {-1}, o);
  // Each tree reaches the other seed's node as its own copy.
  EXPECT_TRUE(same(s.node_id, torch::tensor({0, 4, 1, 5, 0, 5, 1, 4}, torch::kLong).view({4, 2})));
  EXPECT_TRUE(same(s.row, longs({2, 3})));
  EXPECT_TRUE(same(s.col, longs({0, 1})));
}

TEST(NeighborSample, SameGeneratorSeedSameSample) {
  const Graph g;
  const auto run = [&] {
    torchplug::NeighborSampleOptions o;
    o.replace = true;
    o.generator = at::make_generator<at::CPUGeneratorImpl>(7);
    return torchplug::neighbor_sample(g.rowptr, g.col, longs({0, 2, 4}), {3, 2}, o);
  };
  const auto a = run(), b = run();
  EXPECT_TRUE(same(a.row, b.row) && same(a.col, b.col) && same(a.node_id, b.node_id));
  EXPECT_EQ(a.num_sampled_edges_per_hop[0], 9);  // 3 draws for each seed with edges
}

TEST(RandomWalk, OneChoicePerStepAndIsolatedNodesStay) {
  const Graph g;
  const at::Tensor walks = torchplug::random_walk(g.rowptr, g.col, longs({4, 3, 1}), 3, 0.5, 2.0);
  EXPECT_TRUE(same(walks.slice(0, 0, 2), torch::tensor({4, 5, 4, 5, 3, 3, 3, 3}, torch::kLong).view({2, 4})));
  EXPECT_TRUE(same(walks.select(0, 2).slice(0, 0, 2), longs({1, 2})));  // then 0 or 3: a choice
}

TEST(Subgraph, EdgesAmongTheNodesInInputOrder) {
  const Graph g;
  const auto [rowptr, col, edge_id] = torchplug::subgraph(g.rowptr, g.col, longs({2, 0, 3}));
  EXPECT_TRUE(same(rowptr, longs({0, 2, 3, 3})));
  EXPECT_TRUE(same(col, longs({1, 2, 0})));  // 2 -> 0, 2 -> 3; 0 -> 2
  ASSERT_TRUE(edge_id.has_value());
  EXPECT_TRUE(same(*edge_id, longs({3, 4, 1})));
}

TEST(Sampler, ErrorsNameTheOpAndTheArgument) {
  const Graph g;
  EXPECT_TRUE(throws_with([&] { torchplug::neighbor_sample(g.rowptr, g.col, longs({6}), {2}); },
                          {"torchplug::neighbor_sample", "'seed'"}));
  EXPECT_TRUE(throws_with([&] { torchplug::neighbor_sample(g.rowptr, g.col, longs({0}), {-2}); },
                          {"torchplug::neighbor_sample", "'num_neighbors'"}));
  EXPECT_TRUE(throws_with([&] { torchplug::neighbor_sample(g.rowptr, longs({1, 2, 2, 0, 9, 5, 4}), longs({2}), {-1}); },
                          {"torchplug::neighbor_sample", "'col'"}));
  EXPECT_TRUE(throws_with([&] { torchplug::random_walk(g.rowptr, g.col, longs({0}), 2, 0.0, 1.0); },
                          {"torchplug::random_walk", "'p'"}));
  EXPECT_TRUE(throws_with([&] { torchplug::subgraph(g.rowptr, g.col, longs({1, 1})); },
                          {"torchplug::subgraph", "'nodes'"}));
}

}  // namespace
