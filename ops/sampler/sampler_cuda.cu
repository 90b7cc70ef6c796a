// The sampler's CUDA kernels. They draw from the same streams and pick by the
// same code (sampler_pick.h) as the CPU's, so a key gives the CPU's result.
//
// neighbor_sample, per hop: a thread per frontier node computes its window
// and pick count, a scan gives the offsets, a thread per frontier node
// picks; then the relabelling in pyg-lib's discovery order, in parallel: each
// pick inserts its node's key ((tree, node) when disjoint) into an
// open-addressing table and keeps the smallest pick position per new key
// (atomicMin); the picks that hold their key's smallest position are the new
// nodes, numbered by a scan in pick order. random_walk: a thread per seed.
// subgraph: its nodes numbered in the same table, then, as the induced
// sample, a thread per node counting and then writing its kept edges.
// gather_rows: a thread per 16, 8, 4 or 1 bytes of a row, as the row's size
// and alignment allow, so that a warp reads a row's consecutive bytes (from
// pinned host memory: whole PCIe requests).
//
// A rowptr entry or column outside the graph is checked up front in checked
// mode (torchplug.set_checks); outside it a malformed row counts as empty and
// an edge to a node outside [0, N) is left out (a walk stays where it is).

#include "sampler_kernel.h"
#include "sampler_pick.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/library.h"

#include <ATen/Dispatch.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/accumulate.h>

#include <limits>
#include <vector>

namespace torchplug::sampler_detail {
namespace {

constexpr int64_t kEmpty = -1;

// Flags a kernel raises for the host to report (one int32 each).
enum Flag { kUnsorted = 0, kZeroWeights = 1, kRepeatedNode = 2, kFlags = 3 };

template <typename index_t>
__device__ __forceinline__ bool read_row(const index_t* rowptr, int64_t E, int64_t v, int64_t& begin,
                                         int64_t& end) {
  begin = rowptr[v], end = rowptr[v + 1];
  if (begin < 0 || begin > end || end > E) {
    begin = end = 0;
    return false;
  }
  return true;
}

// The open-addressing table of node keys (>= 0): keys, the local id of each
// (kEmpty until numbered) and the smallest pick position that found it new.
struct Table {
  int64_t* keys;
  int64_t* local;
  unsigned long long* first;
  int64_t mask;
};

__device__ __forceinline__ int64_t home(int64_t key, int64_t mask) {
  return static_cast<int64_t>((static_cast<unsigned long long>(key) * 0x9e3779b97f4a7c15ULL) >> 17) & mask;
}

__device__ int64_t insert(const Table& t, int64_t key) {
  for (int64_t slot = home(key, t.mask);; slot = (slot + 1) & t.mask) {
    const auto seen = static_cast<int64_t>(atomicCAS(reinterpret_cast<unsigned long long*>(t.keys + slot),
                                                     static_cast<unsigned long long>(kEmpty),
                                                     static_cast<unsigned long long>(key)));
    if (seen == kEmpty || seen == key) return slot;
  }
}

__device__ int64_t find(const Table& t, int64_t key) {
  for (int64_t slot = home(key, t.mask);; slot = (slot + 1) & t.mask) {
    if (t.keys[slot] == key) return slot;
    if (t.keys[slot] == kEmpty) return kEmpty;
  }
}

// ---- neighbor_sample kernels -------------------------------------------------

// The seeds' keys, each with its first position (a repeated seed keeps its
// place in the node list; reaching it names its first).
__global__ void insert_seeds_kernel(int64_t B, const int64_t* seed, int64_t N, bool disjoint, Table t) {
  TORCHPLUG_GRID_STRIDE_LOOP(b, B) {
    atomicMin(t.first + insert(t, disjoint ? b * N + seed[b] : seed[b]), static_cast<unsigned long long>(b));
  }
}

// Each key's first position becomes its local id; `repeated` (if given) is
// raised for a key named twice.
__global__ void number_seeds_kernel(int64_t B, const int64_t* seed, int64_t N, bool disjoint, Table t,
                                    int32_t* repeated) {
  TORCHPLUG_GRID_STRIDE_LOOP(b, B) {
    const int64_t slot = find(t, disjoint ? b * N + seed[b] : seed[b]);
    if (t.first[slot] == static_cast<unsigned long long>(b)) {
      t.local[slot] = b;
    } else if (repeated != nullptr) {
      *repeated = 1;
    }
  }
}

template <typename index_t>
__global__ void window_kernel(int64_t F, const int64_t* frontier, const int64_t* tree, const index_t* rowptr,
                              const index_t* col, int64_t N, int64_t E, int64_t count, bool replace, bool last,
                              const int64_t* node_time, const int64_t* edge_time, const int64_t* root_time,
                              int64_t* lo, int64_t* hi, int64_t* picks, int32_t* flags) {
  TORCHPLUG_GRID_STRIDE_LOOP(f, F) {
    int64_t a = 0, b = 0;
    read_row(rowptr, E, frontier[f], a, b);
    bool sorted = true, col_ok = true;
    const bool temporal = root_time != nullptr;
    picks[f] = window(a, b, count, replace, temporal, last, temporal ? root_time[tree[f]] : 0, col, N, node_time,
                      edge_time, sorted, col_ok);
    if (!sorted) flags[kUnsorted] = 1;
    lo[f] = a, hi[f] = b;
  }
}

__global__ void pick_kernel(int64_t F, int64_t base, int64_t hop, uint64_t key, const int64_t* lo, const int64_t* hi,
                            const int64_t* end_of, int64_t count, bool replace, EdgeWeights weight, int64_t* picks,
                            double* scratch, int32_t* flags) {
  TORCHPLUG_GRID_STRIDE_LOOP(f, F) {
    const int64_t start = f == 0 ? 0 : end_of[f - 1];
    Stream s(key, static_cast<uint64_t>(hop), static_cast<uint64_t>(base + f));
    if (!pick(picks + start, scratch == nullptr ? nullptr : scratch + start, lo[f], hi[f], end_of[f] - start, count,
              replace, weight, s)) {
      flags[kZeroWeights] = 1;
    }
  }
}

// The frontier position of pick j: the first f with end_of[f] > j.
__device__ __forceinline__ int64_t source_of(int64_t j, const int64_t* end_of, int64_t F) {
  int64_t low = 0, high = F;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (end_of[mid] > j) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return low;
}

template <typename index_t>
__global__ void insert_picks_kernel(int64_t P, const int64_t* picks, const int64_t* end_of, int64_t F,
                                    const int64_t* tree, const index_t* col, int64_t N, bool disjoint, Table t,
                                    int64_t* slot_of) {
  TORCHPLUG_GRID_STRIDE_LOOP(j, P) {
    const int64_t c = col[picks[j]];
    if (c < 0 || c >= N) {
      slot_of[j] = kEmpty;
      continue;
    }
    const int64_t slot = insert(t, disjoint ? tree[source_of(j, end_of, F)] * N + c : c);
    slot_of[j] = slot;
    if (t.local[slot] == kEmpty) atomicMin(t.first + slot, static_cast<unsigned long long>(j));
  }
}

// 1 where pick j is a kept edge; 1 in is_new where it found its node first.
__global__ void mark_kernel(int64_t P, const int64_t* slot_of, Table t, int64_t* kept, int64_t* is_new) {
  TORCHPLUG_GRID_STRIDE_LOOP(j, P) {
    const int64_t slot = slot_of[j];
    kept[j] = slot != kEmpty;
    is_new[j] = slot != kEmpty && t.local[slot] == kEmpty && t.first[slot] == static_cast<unsigned long long>(j);
  }
}

template <typename index_t>
__global__ void number_kernel(int64_t P, const int64_t* slot_of, const int64_t* new_end, const int64_t* picks,
                              const int64_t* end_of, int64_t F, const int64_t* tree, const index_t* col,
                              int64_t base, Table t, int64_t* nodes, int64_t* trees) {
  TORCHPLUG_GRID_STRIDE_LOOP(j, P) {
    const int64_t slot = slot_of[j];
    if (slot == kEmpty || t.local[slot] != kEmpty || t.first[slot] != static_cast<unsigned long long>(j)) continue;
    const int64_t n = new_end[j] - 1;
    nodes[n] = col[picks[j]];
    if (trees != nullptr) trees[n] = tree[source_of(j, end_of, F)];
    t.local[slot] = base + n;  // read by the next kernel only: no pick of this hop races on it
  }
}

__global__ void edges_kernel(int64_t P, const int64_t* slot_of, const int64_t* kept_end, const int64_t* picks,
                             const int64_t* end_of, int64_t F, int64_t frontier_base, Table t, int64_t* rows,
                             int64_t* cols, int64_t* ids) {
  TORCHPLUG_GRID_STRIDE_LOOP(j, P) {
    const int64_t slot = slot_of[j];
    if (slot == kEmpty) continue;
    const int64_t e = kept_end[j] - 1;
    rows[e] = frontier_base + source_of(j, end_of, F);
    cols[e] = t.local[slot];
    ids[e] = picks[j];
  }
}

// The edges among a node set (its keys in the table, numbered): each node's
// edges to a node of the set, counted (into counts), then written from
// end_of[i - 1] in edge order (neighbor_sample's directed=False, subgraph).
template <typename index_t>
__global__ void induced_kernel(int64_t n, const int64_t* nodes, const index_t* rowptr, const index_t* col, int64_t N,
                               int64_t E, Table t, const int64_t* end_of, int64_t* counts, int64_t* rows,
                               int64_t* cols, int64_t* ids) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, n) {
    const bool count = counts != nullptr;
    int64_t a = 0, b = 0, at = count || i == 0 ? 0 : end_of[i - 1];
    read_row(rowptr, E, nodes[i], a, b);
    for (int64_t e = a; e < b; ++e) {
      const int64_t c = col[e];
      const int64_t slot = c < 0 || c >= N ? kEmpty : find(t, c);
      if (slot == kEmpty) continue;
      if (!count) rows[at] = i, cols[at] = t.local[slot], ids[at] = e;
      ++at;
    }
    if (count) counts[i] = at;
  }
}

// ---- random_walk kernel ----------------------------------------------------

template <typename index_t>
__global__ void walk_kernel(int64_t S, const index_t* rowptr, const index_t* col, int64_t N, int64_t E,
                            const index_t* seed, int64_t L, double p, double q, uint64_t key, index_t* out) {
  const bool uniform = p == 1 && q == 1;
  const double most = fmax(fmax(1 / p, 1.0), 1 / q);
  TORCHPLUG_GRID_STRIDE_LOOP(i, S) {
    Stream s(key, static_cast<uint64_t>(i));
    int64_t v = seed[i], previous = -1;
    out[i * (L + 1)] = static_cast<index_t>(v);
    for (int64_t step = 1; step <= L; ++step) {
      int64_t a = 0, b = 0, next = v;
      read_row(rowptr, E, v, a, b);
      while (a < b) {
        next = col[a + static_cast<int64_t>(s.below(b - a))];
        if (next < 0 || next >= N) {
          next = v;
          break;
        }
        if (uniform || previous < 0) break;
        double weight = 1 / q;
        if (next == previous) {
          weight = 1 / p;
        } else {
          int64_t ta = 0, tb = 0;
          read_row(rowptr, E, previous, ta, tb);
          for (int64_t e = ta; e < tb; ++e) {
            if (col[e] == next) {
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
}

// ---- host side -----------------------------------------------------------------

// Checked mode on the sampling GPU: every rowptr entry and column, before any
// kernel reads them (where the graph lies: on that GPU or in pinned host memory).
void check_graph_values(const char* op, const at::Tensor& rowptr, const at::Tensor& col, const at::Device& on) {
  if (!core::validates_indices(on)) return;
  core::check_offsets(op, "rowptr", rowptr.to(at::kLong), col.size(0), "E = col.size(0)");
  core::check_index_range(op, "col", core::index_bounds(col.to(at::kLong)), rowptr.size(0) - 1);
}

// Tensors in pinned host memory that the kernels queued so far read: each
// block goes back to PyTorch's pinned-memory cache (for the next pin_memory()
// to fill) only once those kernels have run.
void hold_while_read(std::initializer_list<OptTensor> tensors) {
  for (const OptTensor& t : tensors) {
    if (!t || !t->is_cpu() || t->numel() == 0) continue;
    const c10::DataPtr& data = t->storage().data_ptr();
    at::getHostAllocator(at::kCUDA)->record_event(data.get(), data.get_context(), at::cuda::getCurrentCUDAStream());
  }
}

void raise_flags(const char* op, const at::Tensor& flags) {
  const at::Tensor host = flags.cpu();
  const int32_t* f = host.const_data_ptr<int32_t>();
  TORCH_CHECK(!f[kUnsorted], op, ": argument 'node_time' or 'edge_time': temporal sampling needs each ",
              "neighbourhood sorted by time, and one is not");
  TORCH_CHECK(!f[kZeroWeights], op,
              ": argument 'edge_weight' weighs a neighbourhood 0 in all: nothing to draw with replace=True");
  TORCH_CHECK(!f[kRepeatedNode], op, ": argument 'nodes' holds a node twice; the nodes must be distinct");
}

int64_t last_of(const at::Tensor& inclusive) { return inclusive.numel() == 0 ? 0 : inclusive[-1].item<int64_t>(); }

// The table's arrays, sized for `capacity` keys at most half full; `grow`
// rehashes the keys (with their ids) into a table for `capacity`.
struct TableStorage {
  at::Tensor keys, local, first;

  static TableStorage make(int64_t capacity, const at::TensorOptions& options) {
    int64_t slots = 1024;
    while (slots < 2 * capacity) slots *= 2;
    return {at::full({slots}, kEmpty, options), at::full({slots}, kEmpty, options),
            at::full({slots}, -1, options)};  // -1: all bits set, no pick yet
  }
  Table view() {
    return {keys.mutable_data_ptr<int64_t>(), local.mutable_data_ptr<int64_t>(),
            reinterpret_cast<unsigned long long*>(first.mutable_data_ptr<int64_t>()), keys.size(0) - 1};
  }
};

__global__ void rehash_kernel(int64_t slots, const int64_t* keys, const int64_t* local, Table into) {
  TORCHPLUG_GRID_STRIDE_LOOP(i, slots) {
    if (keys[i] == kEmpty) continue;
    into.local[insert(into, keys[i])] = local[i];
  }
}

void ensure(TableStorage& table, int64_t capacity) {
  if (2 * capacity <= table.keys.size(0)) return;
  TableStorage bigger = TableStorage::make(capacity, table.keys.options());
  core::launch(rehash_kernel, table.keys.size(0), table.keys.size(0), table.keys.const_data_ptr<int64_t>(),
               table.local.const_data_ptr<int64_t>(), bigger.view());
  table = bigger;
}

// (end_of [n], rows, cols, ids): induced_kernel's count, scan and write, int64.
template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> edges_among(const at::Tensor& nodes, const index_t* rowptr,
                                                                       const index_t* col, int64_t N, int64_t E,
                                                                       const Table& t) {
  const int64_t n = nodes.size(0);
  at::Tensor counts = at::empty({n}, nodes.options());
  core::launch(induced_kernel<index_t>, n, n, nodes.const_data_ptr<int64_t>(), rowptr, col, N, E, t, nullptr,
               counts.mutable_data_ptr<int64_t>(), nullptr, nullptr, nullptr);
  const at::Tensor end_of = at::cumsum(counts, 0);
  const int64_t total = last_of(end_of);
  at::Tensor r = at::empty({total}, nodes.options()), c = at::empty({total}, nodes.options()),
             e = at::empty({total}, nodes.options());
  if (total == 0) return {end_of, r, c, e};
  core::launch(induced_kernel<index_t>, n, n, nodes.const_data_ptr<int64_t>(), rowptr, col, N, E, t,
               end_of.const_data_ptr<int64_t>(), nullptr, r.mutable_data_ptr<int64_t>(), c.mutable_data_ptr<int64_t>(),
               e.mutable_data_ptr<int64_t>());
  return {end_of, r, c, e};
}

template <typename index_t>
NeighborSample sample_cuda(const SampleProblem& p) {
  const char* op = kNeighborSample.name().c_str();
  check_graph_values(op, p.rowptr, p.col, p.seed.device());
  const auto longs = p.seed.options().dtype(at::kLong);
  const int64_t N = p.rowptr.size(0) - 1, E = p.col.size(0), B = p.seed.size(0);
  const index_t* rowptr = p.rowptr.const_data_ptr<index_t>();
  const index_t* col = p.col.const_data_ptr<index_t>();
  const EdgeWeights weight = edge_weights(p.edge_weight);
  const int64_t* node_time = p.node_time ? p.node_time->const_data_ptr<int64_t>() : nullptr;
  const int64_t* edge_time = p.edge_time ? p.edge_time->const_data_ptr<int64_t>() : nullptr;
  at::Tensor flags = at::zeros({kFlags}, p.seed.options().dtype(at::kInt));

  at::Tensor frontier = p.seed.to(at::kLong);
  at::Tensor tree = p.disjoint ? at::arange(B, longs) : at::Tensor();
  at::Tensor root_time;
  if (p.seed_time) {
    root_time = *p.seed_time;
  } else if (p.node_time) {  // the seeds' own times, read where node_time lies
    root_time = p.node_time->index_select(0, frontier.to(p.node_time->device())).to(frontier.device());
  }
  std::vector<at::Tensor> nodes{frontier}, trees{tree}, rows, cols, ids;
  std::vector<int64_t> nodes_per_hop{B}, edges_per_hop;

  TableStorage table = TableStorage::make(B, longs);
  core::launch(insert_seeds_kernel, B, B, frontier.const_data_ptr<int64_t>(), N, p.disjoint, table.view());
  core::launch(number_seeds_kernel, B, B, frontier.const_data_ptr<int64_t>(), N, p.disjoint, table.view(), nullptr);
  int64_t found = B, frontier_base = 0;
  for (int64_t h = 0; h < static_cast<int64_t>(p.num_neighbors.size()); ++h) {
    const int64_t count = p.num_neighbors[h], F = frontier.size(0);
    at::Tensor lo = at::empty({F}, longs), hi = at::empty({F}, longs), counts = at::empty({F}, longs);
    core::launch(window_kernel<index_t>, F, F, frontier.const_data_ptr<int64_t>(),
                 tree.defined() ? tree.const_data_ptr<int64_t>() : nullptr, rowptr, col, N, E, count, p.replace,
                 p.last, node_time, edge_time, root_time.defined() ? root_time.const_data_ptr<int64_t>() : nullptr,
                 lo.mutable_data_ptr<int64_t>(), hi.mutable_data_ptr<int64_t>(), counts.mutable_data_ptr<int64_t>(),
                 flags.mutable_data_ptr<int32_t>());
    const at::Tensor end_of = at::cumsum(counts, 0);
    const int64_t P = last_of(end_of);
    at::Tensor picks = at::empty({P}, longs);
    at::Tensor scratch = weight.present() && !p.replace ? at::empty({P}, longs.dtype(at::kDouble)) : at::Tensor();
    core::launch(pick_kernel, F, F, frontier_base, h, p.key, lo.const_data_ptr<int64_t>(),
                 hi.const_data_ptr<int64_t>(), end_of.const_data_ptr<int64_t>(), count, p.replace,
                 weight, picks.mutable_data_ptr<int64_t>(),
                 scratch.defined() ? scratch.mutable_data_ptr<double>() : nullptr, flags.mutable_data_ptr<int32_t>());
    raise_flags(op, flags);  // before the picks are read: a failed pick wrote none

    ensure(table, found + P);
    const Table t = table.view();
    at::Tensor slot_of = at::empty({P}, longs), kept = at::empty({P}, longs), is_new = at::empty({P}, longs);
    core::launch(insert_picks_kernel<index_t>, P, P, picks.const_data_ptr<int64_t>(), end_of.const_data_ptr<int64_t>(),
                 F, tree.defined() ? tree.const_data_ptr<int64_t>() : nullptr, col, N, p.disjoint, t,
                 slot_of.mutable_data_ptr<int64_t>());
    core::launch(mark_kernel, P, P, slot_of.const_data_ptr<int64_t>(), t, kept.mutable_data_ptr<int64_t>(),
                 is_new.mutable_data_ptr<int64_t>());
    const at::Tensor new_end = at::cumsum(is_new, 0), kept_end = at::cumsum(kept, 0);
    const int64_t fresh = last_of(new_end), edges = last_of(kept_end);
    at::Tensor next = at::empty({fresh}, longs), next_tree = p.disjoint ? at::empty({fresh}, longs) : at::Tensor();
    core::launch(number_kernel<index_t>, P, P, slot_of.const_data_ptr<int64_t>(), new_end.const_data_ptr<int64_t>(),
                 picks.const_data_ptr<int64_t>(), end_of.const_data_ptr<int64_t>(), F,
                 tree.defined() ? tree.const_data_ptr<int64_t>() : nullptr, col, found, t,
                 next.mutable_data_ptr<int64_t>(), next_tree.defined() ? next_tree.mutable_data_ptr<int64_t>() : nullptr);
    if (p.directed) {
      at::Tensor r = at::empty({edges}, longs), c = at::empty({edges}, longs), e = at::empty({edges}, longs);
      core::launch(edges_kernel, P, P, slot_of.const_data_ptr<int64_t>(), kept_end.const_data_ptr<int64_t>(),
                   picks.const_data_ptr<int64_t>(), end_of.const_data_ptr<int64_t>(), F, frontier_base, t,
                   r.mutable_data_ptr<int64_t>(), c.mutable_data_ptr<int64_t>(), e.mutable_data_ptr<int64_t>());
      rows.push_back(r), cols.push_back(c), ids.push_back(e);
    }
    nodes.push_back(next), trees.push_back(next_tree);
    nodes_per_hop.push_back(fresh), edges_per_hop.push_back(edges);
    frontier_base = found, found += fresh, frontier = next, tree = next_tree;
  }

  at::Tensor node_id = at::cat(nodes);
  if (!p.directed) {
    edges_per_hop.clear();
    const auto [end_of, r, c, e] = edges_among<index_t>(node_id, rowptr, col, N, E, table.view());
    rows = {r}, cols = {c}, ids = {e};
  }
  const auto dtype = p.rowptr.scalar_type();
  const auto joined = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, longs.dtype(dtype)) : at::cat(parts).to(dtype);
  };
  node_id = node_id.to(dtype);
  if (p.disjoint) node_id = at::stack({at::cat(trees).to(dtype), node_id}, 1);
  at::Tensor out_row = joined(rows), out_col = joined(cols);
  if (p.csc) std::swap(out_row, out_col);
  OptTensor edge_id;
  if (p.return_edge_id) edge_id = joined(ids);
  return {out_row, out_col, node_id, edge_id, nodes_per_hop, edges_per_hop};
}

template <typename index_t>
at::Tensor walk_cuda(const WalkProblem& p) {
  check_graph_values(kRandomWalk.name().c_str(), p.rowptr, p.col, p.seed.device());
  const int64_t S = p.seed.size(0);
  at::Tensor out = at::empty({S, p.walk_length + 1}, p.seed.options());
  core::launch(walk_kernel<index_t>, S, S, p.rowptr.const_data_ptr<index_t>(), p.col.const_data_ptr<index_t>(),
               p.rowptr.size(0) - 1, p.col.size(0), p.seed.const_data_ptr<index_t>(), p.walk_length, p.p, p.q, p.key,
               out.mutable_data_ptr<index_t>());
  return out;
}

template <typename index_t>
std::tuple<at::Tensor, at::Tensor, OptTensor> subgraph_cuda(const SubgraphProblem& p) {
  const char* op = kSubgraph.name().c_str();
  check_graph_values(op, p.rowptr, p.col, p.nodes.device());
  const int64_t N = p.rowptr.size(0) - 1, E = p.col.size(0), n = p.nodes.size(0);
  const at::Tensor nodes = p.nodes.to(at::kLong);
  TableStorage table = TableStorage::make(n, nodes.options());
  at::Tensor flags = at::zeros({kFlags}, nodes.options().dtype(at::kInt));
  core::launch(insert_seeds_kernel, n, n, nodes.const_data_ptr<int64_t>(), N, false, table.view());
  core::launch(number_seeds_kernel, n, n, nodes.const_data_ptr<int64_t>(), N, false, table.view(),
               flags.mutable_data_ptr<int32_t>() + kRepeatedNode);
  raise_flags(op, flags);
  const auto [end_of, rows, cols, ids] =
      edges_among<index_t>(nodes, p.rowptr.const_data_ptr<index_t>(), p.col.const_data_ptr<index_t>(), N, E,
                           table.view());
  const auto dtype = p.rowptr.scalar_type();
  const at::Tensor out_rowptr = at::cat({at::zeros({1}, nodes.options()), end_of}).to(dtype);
  return {out_rowptr, cols.to(dtype), p.return_edge_id ? OptTensor(ids.to(dtype)) : std::nullopt};
}

// ---- gather_rows ----------------------------------------------------------------------

// Row `index[i]` of x (its `words` words of Word each) to row i of out; a row
// outside [0, rows) (unchecked mode) leaves zeros.
template <typename Word, typename index_t>
__global__ void gather_rows_kernel(const Word* __restrict__ x, const index_t* __restrict__ index, int64_t rows,
                                   int64_t words, int64_t n, Word* __restrict__ out) {
  TORCHPLUG_GRID_STRIDE_LOOP(k, n * words) {
    const int64_t i = k / words, w = k - i * words;
    const int64_t r = index[i];
    out[k] = r >= 0 && r < rows ? x[r * words + w] : Word{};
  }
}

template <typename index_t>
void gather_rows_cuda(const at::Tensor& x, const at::Tensor& index, at::Tensor& out) {
  const int64_t n = index.size(0), bytes = c10::multiply_integers(x.sizes().slice(1)) * x.element_size();
  const auto copy = [&](auto word) {
    using Word = decltype(word);
    const int64_t words = bytes / static_cast<int64_t>(sizeof(Word));
    core::launch(gather_rows_kernel<Word, index_t>, n * words, static_cast<const Word*>(x.const_data_ptr()),
                 index.const_data_ptr<index_t>(), x.size(0), words, n, static_cast<Word*>(out.mutable_data_ptr()));
  };
  const auto aligned = [&](int64_t size) {
    return bytes % size == 0 && reinterpret_cast<uintptr_t>(x.const_data_ptr()) % size == 0;
  };
  if (aligned(16)) {
    copy(uint4{});
  } else if (aligned(8)) {
    copy(uint2{});
  } else if (aligned(4)) {
    copy(uint32_t{});
  } else {
    copy(uint8_t{});
  }
}

// ---- the CUDA entry points ------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor, OptTensor, std::vector<int64_t>, std::vector<int64_t>>
neighbor_sample_kernel(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                       c10::IntArrayRef num_neighbors, const OptTensor& node_time, const OptTensor& edge_time,
                       const OptTensor& seed_time, const OptTensor& edge_weight, bool csc, bool replace,
                       bool directed, bool disjoint, c10::string_view temporal_strategy, bool return_edge_id,
                       const std::optional<at::Generator>& generator) {
  core::check_cuda(kNeighborSample.name().c_str(), "seed", seed);
  const c10::cuda::CUDAGuard guard(seed.device());
  const SampleProblem p = plan_neighbor_sample(rowptr, col, seed, num_neighbors, node_time, edge_time, seed_time,
                                               edge_weight, csc, replace, directed, disjoint, temporal_strategy,
                                               return_edge_id, generator);
  NeighborSample s;
  AT_DISPATCH_INDEX_TYPES(p.rowptr.scalar_type(), "torchplug::neighbor_sample", [&] { s = sample_cuda<index_t>(p); });
  hold_while_read({p.rowptr, p.col, p.node_time, p.edge_time, p.edge_weight});
  return {s.row, s.col, s.node_id, s.edge_id, s.num_sampled_nodes_per_hop, s.num_sampled_edges_per_hop};
}

at::Tensor random_walk_kernel(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                              int64_t walk_length, double p, double q, const std::optional<at::Generator>& generator) {
  core::check_cuda(kRandomWalk.name().c_str(), "seed", seed);
  const c10::cuda::CUDAGuard guard(seed.device());
  const WalkProblem w = plan_random_walk(rowptr, col, seed, walk_length, p, q, generator);
  at::Tensor out;
  AT_DISPATCH_INDEX_TYPES(w.rowptr.scalar_type(), "torchplug::random_walk", [&] { out = walk_cuda<index_t>(w); });
  hold_while_read({w.rowptr, w.col});
  return out;
}

std::tuple<at::Tensor, at::Tensor, OptTensor> subgraph_entry(const at::Tensor& rowptr, const at::Tensor& col,
                                                             const at::Tensor& nodes, bool return_edge_id) {
  core::check_cuda(kSubgraph.name().c_str(), "nodes", nodes);
  const c10::cuda::CUDAGuard guard(nodes.device());
  const SubgraphProblem s = plan_subgraph(rowptr, col, nodes, return_edge_id);
  std::tuple<at::Tensor, at::Tensor, OptTensor> out;
  AT_DISPATCH_INDEX_TYPES(s.rowptr.scalar_type(), "torchplug::subgraph", [&] { out = subgraph_cuda<index_t>(s); });
  hold_while_read({s.rowptr, s.col});
  return out;
}

at::Tensor gather_rows_entry(const at::Tensor& x, const at::Tensor& index) {
  const char* op = kGatherRows.name().c_str();
  core::check_cuda(op, "index", index);
  const c10::cuda::CUDAGuard guard(index.device());
  check_gather_rows(x, index);
  if (core::validates_indices(index.device())) {
    core::check_index_range(op, "index", core::index_bounds(index.to(at::kLong)), x.size(0));
  }
  const at::Tensor rows = x.contiguous(), positions = index.contiguous();
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = index.size(0);
  at::Tensor out = at::empty(shape, index.options().dtype(x.scalar_type()));
  if (out.numel() == 0) return out;
  AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "torchplug::gather_rows",
                          [&] { gather_rows_cuda<index_t>(rows, positions, out); });
  hold_while_read({rows});
  return out;
}

}  // namespace
}  // namespace torchplug::sampler_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  using namespace torchplug::sampler_detail;
  m.impl(kNeighborSample, &neighbor_sample_kernel);
  m.impl(kRandomWalk, &random_walk_kernel);
  m.impl(kSubgraph, &subgraph_entry);
  m.impl(kGatherRows, &gather_rows_entry);
}
