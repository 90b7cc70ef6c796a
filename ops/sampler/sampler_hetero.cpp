// hetero_neighbor_sample on the CPU: neighbor_sample over node types and
// edge types, as pyg-lib samples them. Hop by hop, edge type by edge type,
// the nodes of the expanded type (the destination with csc, else the
// source) found in the previous hop pick their edges (pick_frontier, streams
// (key, hop * T + t, position): one edge type gives neighbor_sample's
// result), and one ordered pass relabels the neighbours into their own
// type's node list. Trees (disjoint mode) are numbered across node types in
// the order the seeds are given.

#include "sampler_cpu.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace torchplug::sampler_detail {
namespace {

using HeteroResult = std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
                                std::vector<at::Tensor>, std::vector<int64_t>, std::vector<int64_t>>;
using OptTensors = c10::List<std::optional<at::Tensor>>;

// Entry i of a per-type list, or None where the list is empty (absent) or holds None there.
OptTensor entry(const OptTensors& list, size_t i) {
  return list.empty() ? std::nullopt : static_cast<OptTensor>(list.get(i));
}

struct HeteroProblem {
  std::vector<at::Tensor> rowptr, col;  // per edge type
  std::vector<int64_t> src_type, dst_type, num_neighbors, num_nodes;  // num_nodes: per node type, -1 unknown
  std::vector<OptTensor> seed, node_time, seed_time;                  // per node type
  std::vector<OptTensor> edge_time, edge_weight;                      // per edge type
  int64_t hops;
  bool csc, replace, disjoint, last, return_edge_id;
  uint64_t key;
};

HeteroProblem plan_hetero(at::TensorList rowptr, at::TensorList col, c10::IntArrayRef src_type,
                          c10::IntArrayRef dst_type, const OptTensors& seed, c10::IntArrayRef num_neighbors,
                          const OptTensors& node_time, const OptTensors& edge_time, const OptTensors& seed_time,
                          const OptTensors& edge_weight, bool csc, bool replace, bool directed, bool disjoint,
                          c10::string_view temporal_strategy, bool return_edge_id,
                          const std::optional<at::Generator>& generator) {
  const char* op = kHeteroNeighborSample.name().c_str();
  const size_t T = rowptr.size(), K = seed.size();
  TORCH_CHECK(col.size() == T && src_type.size() == T && dst_type.size() == T, op,
              ": arguments 'rowptr', 'col', 'src_type' and 'dst_type' need one entry per edge type, got ",
              rowptr.size(), ", ", col.size(), ", ", src_type.size(), " and ", dst_type.size());
  TORCH_CHECK(T > 0 && num_neighbors.size() % T == 0, op, ": argument 'num_neighbors' needs as many fanouts for ",
              "each of the ", T, " edge types, got ", num_neighbors.size());
  TORCH_CHECK(node_time.empty() || node_time.size() == K, op, ": argument 'node_time' needs one entry per node type");
  TORCH_CHECK(seed_time.empty() || seed_time.size() == K, op, ": argument 'seed_time' needs one entry per node type");
  TORCH_CHECK(edge_time.empty() || edge_time.size() == T, op, ": argument 'edge_time' needs one entry per edge type");
  TORCH_CHECK(edge_weight.empty() || edge_weight.size() == T, op,
              ": argument 'edge_weight' needs one entry per edge type");
  TORCH_CHECK(directed, op, ": directed=False (induced subgraphs) is not supported for heterogeneous graphs");
  HeteroProblem p;
  p.num_nodes.assign(K, -1);
  for (size_t t = 0; t < T; ++t) {
    for (const int64_t type : {src_type[t], dst_type[t]}) {
      TORCH_CHECK(type >= 0 && type < static_cast<int64_t>(K), op, ": edge type ", t, " names node type ", type,
                  ", outside the ", K, " node types");
    }
    const int64_t expanded = csc ? dst_type[t] : src_type[t];
    const int64_t hops = static_cast<int64_t>(num_neighbors.size() / T);
    const OptTensor times = entry(edge_time, t), weight = entry(edge_weight, t);
    check_edges(op, rowptr[t], col[t], num_neighbors.slice(t * hops, hops), times, weight);
    const auto dense = [](const OptTensor& v) { return v ? OptTensor(v->contiguous()) : std::nullopt; };
    p.rowptr.push_back(rowptr[t].contiguous()), p.col.push_back(col[t].contiguous());
    p.edge_time.push_back(dense(times)), p.edge_weight.push_back(dense(weight));
    const int64_t n = rowptr[t].size(0) - 1;
    TORCH_CHECK(p.num_nodes[expanded] < 0 || p.num_nodes[expanded] == n, op, ": the edge types expanding node type ",
                expanded, " disagree on its number of nodes (", p.num_nodes[expanded], " and ", n,
                " rows of 'rowptr')");
    p.num_nodes[expanded] = n;
  }
  for (size_t k = 0; k < K; ++k) {
    const OptTensor s = seed.get(k);
    if (s) {
      core::check_same_dtype(op, {"rowptr", &rowptr[0]}, {"seed", &*s});
      TORCH_CHECK(s->dim() == 1, op, ": argument 'seed' of node type ", k, " must be 1-D");
      if (p.num_nodes[k] >= 0) core::check_index_range(op, "seed", core::index_bounds(s->to(at::kLong)), p.num_nodes[k]);
    }
    p.seed.push_back(s ? OptTensor(s->contiguous()) : std::nullopt);
    for (const auto& [name, list, into] : {std::tuple<const char*, const OptTensors*, std::vector<OptTensor>*>{
                                               "node_time", &node_time, &p.node_time},
                                           {"seed_time", &seed_time, &p.seed_time}}) {
      const OptTensor times = entry(*list, k);
      if (times) {
        core::check_dtype(op, name, *times, at::kLong);
        const int64_t want = list == &node_time ? p.num_nodes[k] : (s ? s->size(0) : 0);
        TORCH_CHECK(times->dim() == 1 && (want < 0 || times->size(0) == want), op, ": argument '", name,
                    "' of node type ", k, " has shape ", times->sizes(), ", expected [", want, "]");
      }
      into->push_back(times ? OptTensor(times->contiguous()) : std::nullopt);
    }
  }
  const bool temporal = !node_time.empty() || !edge_time.empty();
  TORCH_CHECK(!temporal || disjoint, op, ": temporal sampling (node_time or edge_time) needs disjoint=True");
  TORCH_CHECK(node_time.empty() || edge_time.empty(), op, ": arguments 'node_time' and 'edge_time' exclude each other");
  TORCH_CHECK(edge_time.empty() || !seed_time.empty(), op, ": argument 'edge_time' needs 'seed_time'");
  TORCH_CHECK(edge_weight.empty() || !temporal, op, ": argument 'edge_weight' takes no temporal sampling");
  TORCH_CHECK(temporal_strategy == "uniform" || temporal_strategy == "last", op,
              ": argument 'temporal_strategy' must be \"uniform\" or \"last\", got \"", std::string(temporal_strategy),
              "\"");
  p.src_type = src_type.vec(), p.dst_type = dst_type.vec(), p.num_neighbors = num_neighbors.vec();
  p.hops = static_cast<int64_t>(num_neighbors.size() / T);
  p.csc = csc, p.replace = replace, p.disjoint = disjoint, p.last = temporal_strategy == "last";
  p.return_edge_id = return_edge_id;
  p.key = draw_key(generator, rowptr[0].device());
  return p;
}

template <typename index_t>
HeteroResult hetero_sample(const HeteroProblem& p) {
  const char* op = kHeteroNeighborSample.name().c_str();
  const int64_t T = static_cast<int64_t>(p.rowptr.size()), K = static_cast<int64_t>(p.seed.size());
  const auto data = [](const OptTensor& t) { return t ? t->const_data_ptr<int64_t>() : nullptr; };

  // Per node type: its nodes, their trees and the local id of each key.
  std::vector<std::vector<index_t>> nodes(K), trees(K);
  std::vector<NodeMap> local;
  std::vector<std::vector<int64_t>> root_time(K);
  std::vector<std::vector<int64_t>> nodes_per_hop(K);
  int64_t tree = 0;
  const auto key = [&](int64_t t, int64_t v) { return p.disjoint ? (t << 32) | v : v; };
  for (int64_t k = 0; k < K; ++k) {
    const int64_t B = p.seed[k] ? p.seed[k]->size(0) : 0;
    const index_t* seed = B > 0 ? p.seed[k]->const_data_ptr<index_t>() : nullptr;
    local.emplace_back(B * 16);
    for (int64_t b = 0; b < B; ++b, ++tree) {
      nodes[k].push_back(seed[b]);
      if (p.disjoint) trees[k].push_back(static_cast<index_t>(tree));
      local[k].insert(key(tree, seed[b]), b);
    }
    nodes_per_hop[k].push_back(B);
  }
  // Each tree's root time: its seed's time (seed_time), else its node's.
  std::vector<int64_t> roots(tree, 0);
  for (int64_t k = 0, b0 = 0; k < K; b0 += nodes_per_hop[k][0], ++k) {
    for (int64_t b = 0; b < nodes_per_hop[k][0]; ++b) {
      if (p.seed_time[k]) {
        roots[b0 + b] = data(p.seed_time[k])[b];
      } else if (p.node_time[k]) {
        roots[b0 + b] = data(p.node_time[k])[nodes[k][b]];
      }
    }
  }

  std::vector<std::vector<index_t>> rows(T), cols(T);
  std::vector<std::vector<int64_t>> edges(T), edges_per_hop(T);
  std::vector<int64_t> begin(K, 0), end(K);
  for (int64_t k = 0; k < K; ++k) end[k] = static_cast<int64_t>(nodes[k].size());
  for (int64_t h = 0; h < p.hops; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t from = p.csc ? p.dst_type[t] : p.src_type[t], to = p.csc ? p.src_type[t] : p.dst_type[t];
      const Graph<index_t> g{p.rowptr[t].const_data_ptr<index_t>(), p.col[t].const_data_ptr<index_t>(),
                             p.num_nodes[to] >= 0 ? p.num_nodes[to] : std::numeric_limits<int32_t>::max(),
                             p.col[t].size(0)};
      const HopOptions hop{p.num_neighbors[t * p.hops + h], p.replace, p.last, data(p.node_time[to]),
                           data(p.edge_time[t]), edge_weights(p.edge_weight[t])};
      const int64_t F = end[from] - begin[from];
      // Temporal where this edge type has a time (its neighbours' or its own); else uniform, as pyg-lib.
      const bool timed = hop.node_time != nullptr || hop.edge_time != nullptr;
      const auto [offset, picks] = pick_frontier(
          op, g, nodes[from].data() + begin[from], p.disjoint ? trees[from].data() + begin[from] : nullptr,
          timed ? roots.data() : nullptr, F, hop, p.key, static_cast<uint64_t>(h * T + t), begin[from]);
      BadValue bad_col;
      for (int64_t f = 0; f < F; ++f) {
        const int64_t i = begin[from] + f, tr = p.disjoint ? trees[from][i] : 0;
        for (int64_t j = offset[f]; j < offset[f + 1]; ++j) {
          int64_t c = 0;
          if (!g.column(picks[j], c, bad_col)) break;
          const auto [id, added] = local[to].insert(key(tr, c), static_cast<int64_t>(nodes[to].size()));
          if (added) {
            nodes[to].push_back(static_cast<index_t>(c));
            if (p.disjoint) trees[to].push_back(static_cast<index_t>(tr));
          }
          rows[t].push_back(static_cast<index_t>(i));
          cols[t].push_back(static_cast<index_t>(id));
          edges[t].push_back(picks[j]);
        }
      }
      bad_col.raise_if_any(op, kBadCol, "edge");
      edges_per_hop[t].push_back(offset[F]);
    }
    for (int64_t k = 0; k < K; ++k) {
      nodes_per_hop[k].push_back(static_cast<int64_t>(nodes[k].size()) - end[k]);
      begin[k] = end[k], end[k] = static_cast<int64_t>(nodes[k].size());
    }
  }

  const auto dtype = p.rowptr[0].scalar_type();
  std::vector<at::Tensor> out_row, out_col, out_node, out_edge;
  std::vector<int64_t> out_nodes_per_hop, out_edges_per_hop;
  for (int64_t t = 0; t < T; ++t) {
    at::Tensor r = to_tensor(std::move(rows[t]), dtype), c = to_tensor(std::move(cols[t]), dtype);
    if (p.csc) std::swap(r, c);
    out_row.push_back(r), out_col.push_back(c);
    if (p.return_edge_id) out_edge.push_back(to_tensor(std::move(edges[t]), at::kLong).to(dtype));
    out_edges_per_hop.insert(out_edges_per_hop.end(), edges_per_hop[t].begin(), edges_per_hop[t].end());
  }
  for (int64_t k = 0; k < K; ++k) {
    at::Tensor n = to_tensor(std::move(nodes[k]), dtype);
    if (p.disjoint) n = at::stack({to_tensor(std::move(trees[k]), dtype), n}, 1);
    out_node.push_back(n);
    out_nodes_per_hop.insert(out_nodes_per_hop.end(), nodes_per_hop[k].begin(), nodes_per_hop[k].end());
  }
  return {out_row, out_col, out_node, out_edge, out_nodes_per_hop, out_edges_per_hop};
}

HeteroResult hetero_neighbor_sample_cpu(at::TensorList rowptr, at::TensorList col, c10::IntArrayRef src_type,
                                        c10::IntArrayRef dst_type, const OptTensors& seed,
                                        c10::IntArrayRef num_neighbors, const OptTensors& node_time,
                                        const OptTensors& edge_time, const OptTensors& seed_time,
                                        const OptTensors& edge_weight, bool csc, bool replace, bool directed,
                                        bool disjoint, c10::string_view temporal_strategy, bool return_edge_id,
                                        const std::optional<at::Generator>& generator) {
  const char* op = kHeteroNeighborSample.name().c_str();
  TORCH_CHECK(!rowptr.empty(), op, ": argument 'rowptr' needs at least one edge type");
  core::check_cpu(op, "rowptr", rowptr[0]);
  const HeteroProblem p = plan_hetero(rowptr, col, src_type, dst_type, seed, num_neighbors, node_time, edge_time,
                                      seed_time, edge_weight, csc, replace, directed, disjoint, temporal_strategy,
                                      return_edge_id, generator);
  HeteroResult out;
  AT_DISPATCH_INDEX_TYPES(p.rowptr[0].scalar_type(), "torchplug::hetero_neighbor_sample",
                          [&] { out = hetero_sample<index_t>(p); });
  return out;
}

}  // namespace
}  // namespace torchplug::sampler_detail

TORCHPLUG_LIBRARY(torchplug, m) { m.define(torchplug::sampler_detail::kHeteroNeighborSample); }

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  m.impl(torchplug::sampler_detail::kHeteroNeighborSample, &torchplug::sampler_detail::hetero_neighbor_sample_cpu);
}
