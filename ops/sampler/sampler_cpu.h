#pragma once

// The CPU kernels' shared parts (sampler_cpu.cpp, sampler_hetero.cpp): the
// report of a bad value met in a parallel loop, the relabelling table, the
// graph read with checks, the results built from vectors, and one hop's picks.

#include "sampler_kernel.h"
#include "sampler_pick.h"

#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <sstream>
#include <utility>
#include <vector>

namespace torchplug::sampler_detail {

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

inline constexpr const char* kBadRowptr = "argument 'rowptr' must start at 0, never decrease and end at E = col.size(0)";
inline constexpr const char* kBadCol = "argument 'col' holds a node outside [0, N)";
inline constexpr const char* kUnsortedNodeTime =
    "argument 'node_time': temporal sampling needs each neighbourhood sorted by its nodes' time, and one is not";
inline constexpr const char* kUnsortedEdgeTime =
    "argument 'edge_time': temporal sampling needs each neighbourhood sorted by time, and one is not";
inline constexpr const char* kZeroWeights =
    "argument 'edge_weight' weighs a neighbourhood 0 in all: nothing to draw with replace=True";

template <typename T>
inline at::Tensor to_tensor(std::vector<T>&& values, at::ScalarType dtype) {
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

// A hop's options and the arrays its windows and picks read (nullptr where absent).
struct HopOptions {
  int64_t count;
  bool replace, last;
  const int64_t* node_time;
  const int64_t* edge_time;
  EdgeWeights edge_weight;
};

// One hop's picks of the frontier `nodes[0, F)` (of trees `trees`, whose
// root times are root_time[tree], when temporal): each node's window and
// pick count in parallel, then its picks in parallel from its own stream
// (key, stream, base + f). Returns (offsets [F + 1], picked edge positions);
// raises for what the windows and picks met (errors name `op`).
template <typename index_t>
std::pair<std::vector<int64_t>, std::vector<int64_t>> pick_frontier(const char* op, const Graph<index_t>& g,
                                                                    const index_t* nodes, const index_t* trees,
                                                                    const int64_t* root_time, int64_t F,
                                                                    const HopOptions& o, uint64_t key,
                                                                    uint64_t stream, int64_t base) {
  const bool temporal = root_time != nullptr;
  std::vector<int64_t> lo(F), hi(F), offset(F + 1, 0);
  BadValue bad_rowptr, bad_col, unsorted, zero_weights;
  at::parallel_for(0, F, 256, [&](int64_t first, int64_t last) {
    for (int64_t f = first; f < last; ++f) {
      int64_t a = 0, b = 0;
      bool sorted = true, col_ok = true;
      if (g.row(nodes[f], a, b, bad_rowptr)) {
        const int64_t row_start = a, row_end = b;
        offset[f + 1] = window(a, b, o.count, o.replace, temporal, o.last, temporal ? root_time[trees[f]] : 0, g.col,
                               g.N, o.node_time, o.edge_time, sorted, col_ok);
        for (int64_t e = row_start, c = 0; !col_ok && e < row_end && g.column(e, c, bad_col); ++e) {
        }  // finds the bad column the window met, for the error
      }
      if (!sorted) unsorted.note(nodes[f], 0);
      lo[f] = a, hi[f] = b;
    }
  });
  bad_rowptr.raise_if_any(op, kBadRowptr, "node");
  bad_col.raise_if_any(op, kBadCol, "edge");
  unsorted.raise_if_any(op, o.node_time != nullptr ? kUnsortedNodeTime : kUnsortedEdgeTime, "node", false, false);
  std::partial_sum(offset.begin(), offset.end(), offset.begin());

  std::vector<int64_t> picks(offset[F]);
  std::vector<double> keys(o.edge_weight.present() && !o.replace ? picks.size() : 0);
  at::parallel_for(0, F, 64, [&](int64_t first, int64_t last) {
    for (int64_t f = first; f < last; ++f) {
      Stream s(key, stream, static_cast<uint64_t>(base + f));
      if (!pick(picks.data() + offset[f], keys.empty() ? nullptr : keys.data() + offset[f], lo[f], hi[f],
                offset[f + 1] - offset[f], o.count, o.replace, o.edge_weight, s)) {
        zero_weights.note(nodes[f], 0);
      }
    }
  });
  zero_weights.raise_if_any(op, kZeroWeights, "node", false, false);
  return {std::move(offset), std::move(picks)};
}

}  // namespace torchplug::sampler_detail
