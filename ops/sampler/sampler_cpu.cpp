// The sampler's CPU kernels. neighbor_sample runs hop by hop: every frontier
// node's candidate window and pick count in parallel, then its picks in
// parallel, each node from its own stream (key, hop, position), then one
// ordered pass that relabels the picked neighbours, so that the result does
// not depend on the thread count. random_walk runs the seeds in parallel,
// each from its own stream; subgraph its nodes. Every rowptr entry and edge
// the kernels read is checked as it is read (IndexError naming the argument).

#include "sampler_cpu.h"
#include "sampler_pick.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace torchplug::sampler_detail {
namespace {

template <typename index_t>
NeighborSample sample(const SampleProblem& p) {
  const char* op = kNeighborSample.name().c_str();
  const Graph<index_t> g{p.rowptr.const_data_ptr<index_t>(), p.col.const_data_ptr<index_t>(),
                         p.rowptr.size(0) - 1, p.col.size(0)};
  const index_t* seed = p.seed.const_data_ptr<index_t>();
  const int64_t B = p.seed.size(0);
  const int64_t* node_time = p.node_time ? p.node_time->const_data_ptr<int64_t>() : nullptr;
  const int64_t* edge_time = p.edge_time ? p.edge_time->const_data_ptr<int64_t>() : nullptr;
  const bool temporal = node_time != nullptr || edge_time != nullptr;
  const EdgeWeights edge_weight = edge_weights(p.edge_weight);

  std::vector<int64_t> root_time(temporal ? B : 0);
  for (int64_t b = 0; b < static_cast<int64_t>(root_time.size()); ++b) {
    root_time[b] = p.seed_time ? p.seed_time->const_data_ptr<int64_t>()[b] : node_time[seed[b]];
  }

  // Every node so far (global id, tree) and the local id of each (tree, node).
  std::vector<index_t> nodes(seed, seed + B), tree;
  if (p.disjoint) {
    tree.resize(B);
    std::iota(tree.begin(), tree.end(), index_t(0));
  }
  const auto key = [&](int64_t t, int64_t v) { return p.disjoint ? t * g.N + v : v; };
  NodeMap local(B * 16);
  for (int64_t b = 0; b < B; ++b) local.insert(key(b, seed[b]), b);  // a repeated seed: its first place

  std::vector<index_t> rows, cols;
  std::vector<int64_t> edges;
  std::vector<int64_t> nodes_per_hop{B}, edges_per_hop;
  BadValue bad_rowptr, bad_col;
  int64_t begin = 0, end = B;
  for (int64_t h = 0; h < static_cast<int64_t>(p.num_neighbors.size()); ++h) {
    const int64_t count = p.num_neighbors[h], frontier = end - begin;
    const HopOptions hop{count, p.replace, p.last, node_time, edge_time, edge_weight};
    const auto [offset, picks] = pick_frontier(op, g, nodes.data() + begin, p.disjoint ? tree.data() + begin : nullptr,
                                               temporal ? root_time.data() : nullptr, frontier, hop, p.key,
                                               static_cast<uint64_t>(h), begin);

    // Relabel in order: source ascending, picks in their order.
    for (int64_t f = 0; f < frontier; ++f) {
      const int64_t i = begin + f, t = p.disjoint ? tree[i] : 0;
      for (int64_t j = offset[f]; j < offset[f + 1]; ++j) {
        int64_t c = 0;
        if (!g.column(picks[j], c, bad_col)) break;
        const auto [id, added] = local.insert(key(t, c), static_cast<int64_t>(nodes.size()));
        if (added) {
          nodes.push_back(static_cast<index_t>(c));
          if (p.disjoint) tree.push_back(static_cast<index_t>(t));
        }
        if (p.directed) {
          rows.push_back(static_cast<index_t>(i));
          cols.push_back(static_cast<index_t>(id));
          edges.push_back(picks[j]);
        }
      }
    }
    bad_col.raise_if_any(op, kBadCol, "edge");
    nodes_per_hop.push_back(static_cast<int64_t>(nodes.size()) - end);
    edges_per_hop.push_back(offset[frontier]);
    begin = end, end = static_cast<int64_t>(nodes.size());
  }

  if (!p.directed) {  // the induced subgraph: every edge among the sampled nodes, by expanded node
    edges_per_hop.clear();
    for (int64_t i = 0; i < static_cast<int64_t>(nodes.size()); ++i) {
      int64_t a = 0, b = 0;
      if (!g.row(nodes[i], a, b, bad_rowptr)) break;
      for (int64_t e = a; e < b; ++e) {
        int64_t c = 0;
        if (!g.column(e, c, bad_col)) break;
        const int64_t id = local.find(c);
        if (id < 0) continue;
        rows.push_back(static_cast<index_t>(i));
        cols.push_back(static_cast<index_t>(id));
        edges.push_back(e);
      }
    }
    bad_rowptr.raise_if_any(op, kBadRowptr, "node");
    bad_col.raise_if_any(op, kBadCol, "edge");
  }

  const auto dtype = p.rowptr.scalar_type();
  at::Tensor node_id = to_tensor(std::move(nodes), dtype);
  if (p.disjoint) node_id = at::stack({to_tensor(std::move(tree), dtype), node_id}, 1);
  at::Tensor out_row = to_tensor(std::move(rows), dtype), out_col = to_tensor(std::move(cols), dtype);
  if (p.csc) std::swap(out_row, out_col);  // the sampled neighbour is the message's source
  OptTensor edge_id;
  if (p.return_edge_id) edge_id = to_tensor(std::move(edges), at::kLong).to(dtype);
  return {out_row, out_col, node_id, edge_id, nodes_per_hop, edges_per_hop};
}

// ---- random_walk -------------------------------------------------------------

template <typename index_t>
at::Tensor walk(const WalkProblem& p) {
  const char* op = kRandomWalk.name().c_str();
  const Graph<index_t> g{p.rowptr.const_data_ptr<index_t>(), p.col.const_data_ptr<index_t>(),
                         p.rowptr.size(0) - 1, p.col.size(0)};
  const index_t* seed = p.seed.const_data_ptr<index_t>();
  const int64_t S = p.seed.size(0), L = p.walk_length;
  at::Tensor out_ = at::empty({S, L + 1}, p.seed.options());
  index_t* out = out_.mutable_data_ptr<index_t>();
  const bool uniform = p.p == 1 && p.q == 1;
  // node2vec's weights 1/p (back to t), 1 (a neighbour of t), 1/q (further), over their largest.
  const double most = std::max({1 / p.p, 1.0, 1 / p.q});
  BadValue bad_rowptr, bad_col;
  at::parallel_for(0, S, 64, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      Stream s(p.key, static_cast<uint64_t>(i));
      int64_t v = seed[i], previous = -1;
      out[i * (L + 1)] = static_cast<index_t>(v);
      for (int64_t step = 1; step <= L; ++step) {
        int64_t a = 0, b = 0, next = v;
        if (!g.row(v, a, b, bad_rowptr)) break;
        bool bad = false;
        while (a < b) {
          if (!g.column(a + static_cast<int64_t>(s.below(b - a)), next, bad_col)) {
            bad = true;  // the walk stops here; the error is raised after the loop
            break;
          }
          if (uniform || previous < 0) break;
          double weight = 1 / p.q;
          if (next == previous) {
            weight = 1 / p.p;
          } else {
            int64_t ta = 0, tb = 0, c = 0;
            g.row(previous, ta, tb, bad_rowptr);
            for (int64_t e = ta; e < tb; ++e) {
              if (g.column(e, c, bad_col) && c == next) {
                weight = 1;
                break;
              }
            }
          }
          if (s.unit() * most < weight) break;
        }
        if (bad) break;
        previous = v, v = next;
        out[i * (L + 1) + step] = static_cast<index_t>(v);
      }
    }
  });
  bad_rowptr.raise_if_any(op, kBadRowptr, "node");
  bad_col.raise_if_any(op, kBadCol, "edge");
  return out_;
}

// ---- subgraph ----------------------------------------------------------------

template <typename index_t>
std::tuple<at::Tensor, at::Tensor, OptTensor> induced(const SubgraphProblem& p) {
  const char* op = kSubgraph.name().c_str();
  const Graph<index_t> g{p.rowptr.const_data_ptr<index_t>(), p.col.const_data_ptr<index_t>(),
                         p.rowptr.size(0) - 1, p.col.size(0)};
  const index_t* nodes = p.nodes.const_data_ptr<index_t>();
  const int64_t n = p.nodes.size(0);
  NodeMap position(n);
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(position.insert(nodes[i], i).second, op, ": argument 'nodes' holds node ",
                static_cast<int64_t>(nodes[i]), " twice; the nodes must be distinct");
  }
  std::vector<int64_t> offset(n + 1, 0);
  BadValue bad_rowptr, bad_col;
  const auto each_kept = [&](int64_t i, auto&& body) {
    int64_t a = 0, b = 0, c = 0;
    if (!g.row(nodes[i], a, b, bad_rowptr)) return;
    for (int64_t e = a; e < b; ++e) {
      if (!g.column(e, c, bad_col)) return;
      const int64_t local = position.find(c);
      if (local >= 0) body(e, local);
    }
  };
  at::parallel_for(0, n, 256, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) each_kept(i, [&](int64_t, int64_t) { ++offset[i + 1]; });
  });
  bad_rowptr.raise_if_any(op, kBadRowptr, "node");
  bad_col.raise_if_any(op, kBadCol, "edge");
  std::partial_sum(offset.begin(), offset.end(), offset.begin());
  const auto options = p.rowptr.options();
  at::Tensor out_rowptr = at::empty({n + 1}, options), out_col = at::empty({offset[n]}, options);
  at::Tensor edge_id = at::empty({p.return_edge_id ? offset[n] : 0}, options);
  index_t* rowptr = out_rowptr.mutable_data_ptr<index_t>();
  index_t* col = out_col.mutable_data_ptr<index_t>();
  index_t* ids = edge_id.mutable_data_ptr<index_t>();
  for (int64_t i = 0; i <= n; ++i) rowptr[i] = static_cast<index_t>(offset[i]);
  at::parallel_for(0, n, 256, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      int64_t j = offset[i];
      each_kept(i, [&](int64_t e, int64_t local) {
        col[j] = static_cast<index_t>(local);
        if (p.return_edge_id) ids[j] = static_cast<index_t>(e);
        ++j;
      });
    }
  });
  return {out_rowptr, out_col, p.return_edge_id ? OptTensor(edge_id) : std::nullopt};
}

}  // namespace

NeighborSample neighbor_sample_cpu(const SampleProblem& p) {
  NeighborSample out;
  AT_DISPATCH_INDEX_TYPES(p.rowptr.scalar_type(), "torchplug::neighbor_sample", [&] { out = sample<index_t>(p); });
  return out;
}

at::Tensor random_walk_cpu(const WalkProblem& p) {
  at::Tensor out;
  AT_DISPATCH_INDEX_TYPES(p.rowptr.scalar_type(), "torchplug::random_walk", [&] { out = walk<index_t>(p); });
  return out;
}

std::tuple<at::Tensor, at::Tensor, OptTensor> subgraph_cpu(const SubgraphProblem& p) {
  std::tuple<at::Tensor, at::Tensor, OptTensor> out;
  AT_DISPATCH_INDEX_TYPES(p.rowptr.scalar_type(), "torchplug::subgraph", [&] { out = induced<index_t>(p); });
  return out;
}

}  // namespace torchplug::sampler_detail
