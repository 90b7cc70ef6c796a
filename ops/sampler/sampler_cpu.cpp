// The sampler's CPU kernels. neighbor_sample runs hop by hop: every frontier
// node's candidate window and pick count in parallel, then its picks in
// parallel, each node from its own stream (key, hop, position), then one
// ordered pass that relabels the picked neighbours, so that the result does
// not depend on the thread count. random_walk runs the seeds in parallel,
// each from its own stream; subgraph its nodes. Every rowptr entry and edge
// the kernels read is checked as it is read (IndexError naming the argument).

#include "sampler_kernel.h"
#include "sampler_pick.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

namespace torchplug::sampler_detail {
namespace {

// The first bad value a parallel loop met (at a node or edge `where`),
// reported after the loop.
class BadValue {
 public:
  void note(int64_t where, int64_t value) {
    int64_t none = -1;
    if (where_.compare_exchange_strong(none, where)) value_ = value;
  }
  // "<op>: <message>: <unit> <where> reads <value>" (no value for `with_value`
  // false), an IndexError for a bad index, else a RuntimeError.
  void raise_if_any(const char* op, const char* message, const char* unit, bool with_value = true,
                    bool index_error = true) const {
    const int64_t where = where_.load();
    if (where < 0) return;
    std::ostringstream text;
    text << op << ": " << message << ": " << unit << " " << where;
    if (with_value) text << " reads " << value_.load();
    if (index_error) TORCH_CHECK_INDEX(false, text.str());
    TORCH_CHECK(false, text.str());
  }

 private:
  std::atomic<int64_t> where_{-1};
  std::atomic<int64_t> value_{0};
};

// The local id of each node key (>= 0): open addressing with linear probing
// over a power-of-two table, kept at most half full. Relabelling looks up
// every sampled edge's node, and std::unordered_map's node per entry made
// it most of a batch's time.
class NodeMap {
 public:
  explicit NodeMap(int64_t expected) { rehash(std::max<int64_t>(16, 2 * expected)); }

  // The value of `key`, inserting `value` for it if it had none; and whether it did.
  std::pair<int64_t, bool> insert(int64_t key, int64_t value) {
    if (2 * (size_ + 1) > static_cast<int64_t>(keys_.size())) rehash(2 * static_cast<int64_t>(keys_.size()));
    for (size_t slot = home(key);; slot = (slot + 1) & mask_) {
      if (keys_[slot] == key) return {values_[slot], false};
      if (keys_[slot] < 0) {
        keys_[slot] = key, values_[slot] = value, ++size_;
        return {value, true};
      }
    }
  }

  // The value of `key`, or -1.
  int64_t find(int64_t key) const {
    for (size_t slot = home(key);; slot = (slot + 1) & mask_) {
      if (keys_[slot] == key) return values_[slot];
      if (keys_[slot] < 0) return -1;
    }
  }

 private:
  size_t home(int64_t key) const {
    return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9e3779b97f4a7c15ULL) >> shift_);
  }

  void rehash(int64_t at_least) {
    int64_t capacity = 16;
    while (capacity < at_least) capacity *= 2;
    std::vector<int64_t> keys(capacity, -1), values(capacity);
    std::swap(keys, keys_), std::swap(values, values_);
    mask_ = static_cast<size_t>(capacity - 1);
    shift_ = 64 - __builtin_ctzll(static_cast<uint64_t>(capacity));
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] >= 0) insert(keys[i], values[i]);
    }
  }

  std::vector<int64_t> keys_, values_;
  size_t mask_ = 0;
  int shift_ = 64;
  int64_t size_ = 0;
};

constexpr const char* kBadRowptr = "argument 'rowptr' must start at 0, never decrease and end at E = col.size(0)";
constexpr const char* kBadCol = "argument 'col' holds a node outside [0, N)";
constexpr const char* kUnsortedNodeTime =
    "argument 'node_time': temporal sampling needs each neighbourhood sorted by its nodes' time, and one is not";
constexpr const char* kUnsortedEdgeTime =
    "argument 'edge_time': temporal sampling needs each neighbourhood sorted by time, and one is not";
constexpr const char* kZeroWeights =
    "argument 'edge_weight' weighs a neighbourhood 0 in all: nothing to draw with replace=True";

template <typename T>
at::Tensor to_tensor(std::vector<T>&& values, at::ScalarType dtype) {
  auto* owned = new std::vector<T>(std::move(values));
  const auto size = static_cast<int64_t>(owned->size());
  return at::from_blob(
      owned->data(), {size}, [owned](void*) { delete owned; }, at::TensorOptions().dtype(dtype));
}

// The graph, read with checks: row v's edges [begin, end) and each edge's column.
template <typename index_t>
struct Graph {
  const index_t* rowptr;
  const index_t* col;
  int64_t N, E;

  // Row v's edges, or false (noted in bad) if rowptr is malformed there.
  bool row(int64_t v, int64_t& begin, int64_t& end, BadValue& bad) const {
    begin = rowptr[v], end = rowptr[v + 1];
    if (begin < 0 || begin > end || end > E) {
      bad.note(v, begin < 0 || begin > E ? begin : end);
      return false;
    }
    return true;
  }
  bool column(int64_t e, int64_t& c, BadValue& bad) const {
    c = col[e];
    if (c < 0 || c >= N) {
      bad.note(e, c);
      return false;
    }
    return true;
  }
};

// ---- neighbor_sample ---------------------------------------------------------

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
  const at::Tensor weight = p.edge_weight ? p.edge_weight->to(at::kDouble) : at::Tensor();
  const double* edge_weight = weight.defined() ? weight.const_data_ptr<double>() : nullptr;

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
  BadValue bad_rowptr, bad_col, unsorted, zero_weights;
  int64_t begin = 0, end = B;
  for (int64_t h = 0; h < static_cast<int64_t>(p.num_neighbors.size()); ++h) {
    const int64_t count = p.num_neighbors[h], frontier = end - begin;
    std::vector<int64_t> lo(frontier), hi(frontier), offset(frontier + 1, 0);
    // Each frontier node's window of candidates and its number of picks.
    at::parallel_for(0, frontier, 256, [&](int64_t first, int64_t last) {
      for (int64_t f = first; f < last; ++f) {
        const int64_t i = begin + f;
        int64_t a = 0, b = 0;
        bool sorted = true, col_ok = true;
        if (g.row(nodes[i], a, b, bad_rowptr)) {
          const int64_t row_start = a, row_end = b;
          offset[f + 1] = window(a, b, count, p.replace, temporal, p.last, temporal ? root_time[tree[i]] : 0, g.col,
                                 g.N, node_time, edge_time, sorted, col_ok);
          for (int64_t e = row_start, c = 0; !col_ok && e < row_end && g.column(e, c, bad_col); ++e) {
          }  // finds the bad column the window met, for the error
        }
        if (!sorted) unsorted.note(nodes[i], 0);
        lo[f] = a, hi[f] = b;
      }
    });
    bad_rowptr.raise_if_any(op, kBadRowptr, "node");
    bad_col.raise_if_any(op, kBadCol, "edge");
    unsorted.raise_if_any(op, node_time != nullptr ? kUnsortedNodeTime : kUnsortedEdgeTime, "node", false, false);
    std::partial_sum(offset.begin(), offset.end(), offset.begin());

    std::vector<int64_t> picks(offset[frontier]);
    std::vector<double> keys(edge_weight != nullptr && !p.replace ? picks.size() : 0);
    at::parallel_for(0, frontier, 64, [&](int64_t first, int64_t last) {
      for (int64_t f = first; f < last; ++f) {
        Stream s(p.key, static_cast<uint64_t>(h), static_cast<uint64_t>(begin + f));
        if (!pick(picks.data() + offset[f], keys.empty() ? nullptr : keys.data() + offset[f], lo[f], hi[f],
                  offset[f + 1] - offset[f], count, p.replace, edge_weight, s)) {
          zero_weights.note(nodes[begin + f], 0);
        }
      }
    });
    zero_weights.raise_if_any(op, kZeroWeights, "node", false, false);

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
        while (a < b) {
          if (!g.column(a + static_cast<int64_t>(s.below(b - a)), next, bad_col)) break;
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
