#pragma once

// Sampling subgraphs for mini-batch training, with pyg-lib's semantics
// (pyg_lib.sampler) on a CSR graph (rowptr [N + 1], col [E]; int32 or int64,
// the seeds and every index result of the same dtype):
//
//   neighbor_sample  from each seed, up to num_neighbors[h] edges of every
//                    node reached at hop h - 1 (-1: all of them), uniform or
//                    weighted by edge_weight, with or without replacement,
//                    temporal (node_time or edge_time against each tree's
//                    seed_time: nothing later is sampled), in disjoint mode
//                    one tree per seed. Nodes are relabelled: the seeds
//                    first, then each hop's new nodes in order of discovery.
//                    Returns (row, col) local edges, node_id ([n], or in
//                    disjoint mode [n, 2] of (batch, node)), edge_id (edge
//                    positions in col), and the nodes (seeds first) and edges
//                    sampled per hop.
//   random_walk      [S, walk_length + 1] walks from the seeds: uniform
//                    steps (p = q = 1) or node2vec's second-order ones,
//                    sampled exactly by rejection; a node without edges keeps
//                    the walk where it is.
//   subgraph         the edges among `nodes` (unique), as a CSR over their
//                    positions, in the input's edge order, with their ids.
//   gather_rows      x[index] on index's device: the features of a sample.
//
// A graph (and gather_rows' x) lies on the seeds' device or, for seeds on a
// GPU, in pinned host memory, which the CUDA kernels read in place through
// unified addressing: graphs larger than the GPU's memory, at PCIe speed.
//
// Randomness comes from `generator` (the default one of the inputs' device
// when none is given): one 64-bit key per call, from which every seed (every
// frontier node, for neighbor_sample) draws its own counter-based stream. A
// fixed seed gives the same result on every run and at every thread count.

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

namespace torchplug {

struct NeighborSample {
  at::Tensor row, col, node_id;
  std::optional<at::Tensor> edge_id;
  std::vector<int64_t> num_sampled_nodes_per_hop, num_sampled_edges_per_hop;
};

struct NeighborSampleOptions {
  std::optional<at::Tensor> node_time, edge_time, seed_time, edge_weight;
  bool csc = false, replace = false, directed = true, disjoint = false;
  std::string_view temporal_strategy = "uniform";
  bool return_edge_id = true;
  std::optional<at::Generator> generator;
};

NeighborSample neighbor_sample(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                               const std::vector<int64_t>& num_neighbors,
                               const NeighborSampleOptions& options = {});

at::Tensor random_walk(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed, int64_t walk_length,
                       double p = 1, double q = 1, const std::optional<at::Generator>& generator = std::nullopt);

// (rowptr [len(nodes) + 1], col (positions in nodes), edge_id (positions in the input col))
std::tuple<at::Tensor, at::Tensor, std::optional<at::Tensor>> subgraph(const at::Tensor& rowptr,
                                                                      const at::Tensor& col,
                                                                      const at::Tensor& nodes,
                                                                      bool return_edge_id = true);

// x[index] (rows of x, any dtype), on index's device; not differentiable.
at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& index);

}  // namespace torchplug
