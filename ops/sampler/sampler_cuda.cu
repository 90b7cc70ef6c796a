// The sampler's CUDA kernels. They draw from the same streams and pick by the
// same code (sampler_pick.h) as the CPU's, so a key gives the CPU's result.
//
// neighbor_sample, per hop: a thread per frontier node computes its window
// and pick count, a scan gives the offsets, a thread per frontier node
// picks; then the relabelling in pyg-lib's discovery order, in parallel: each
// pick inserts its node's key ((tree, node) when disjoint) into an
// open-addressing table and keeps the smallest pick position per new key
// (atomicMin); the picks that hold their key's smallest position are the new
// nodes, numbered by a scan in pick order. The sizes stay on the device
// (each hop's node total and kept edges, read there by the kernels): the
// buffers are sized by host-side bounds from the seeds and fanouts, so that
// a batch reads its sizes back once, at its end; where the fanouts bound
// nothing useful (-1, or bounds past kBoundedKeys) each hop also reads its
// pick count back and sizes its buffers by it. random_walk: a thread per seed.
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

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

namespace torchplug::sampler_detail {
namespace {

constexpr int64_t kEmpty = -1;

// Flags a kernel raises for the host to report (one int64 each).
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
//
// A hop's kernels read its sizes where the batch keeps them on the device:
// `found` points at found[h] of the running node totals, so that its frontier
// is the nodes [found[0], found[1]) of the sample's node list and its new
// nodes are numbered from found[1]. They are launched over host-side bounds
// (F_cap frontier nodes, P_cap picks) and return past the real sizes, writing
// 0 past them where a scan runs over the padding.

// The sum an inclusive scan of n entries ends at (0 for none).
__device__ __forceinline__ int64_t total_of(const int64_t* inclusive, int64_t n) {
  return n == 0 ? 0 : inclusive[n - 1];
}

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
                                    int64_t* repeated) {
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
__global__ void window_kernel(int64_t F_cap, const int64_t* found, const int64_t* nodes, const int64_t* trees,
                              const index_t* rowptr, const index_t* col, int64_t N, int64_t E, int64_t count,
                              bool replace, bool last, const int64_t* node_time, const int64_t* edge_time,
                              const int64_t* root_time, int64_t* lo, int64_t* hi, int64_t* counts, int64_t* flags) {
  const int64_t begin = found[0], F = found[1] - begin;
  TORCHPLUG_GRID_STRIDE_LOOP(f, F_cap) {
    if (f >= F) {
      counts[f] = 0;
      continue;
    }
    int64_t a = 0, b = 0;
    read_row(rowptr, E, nodes[begin + f], a, b);
    bool sorted = true, col_ok = true;
    const bool temporal = root_time != nullptr;
    counts[f] = window(a, b, count, replace, temporal, last, temporal ? root_time[trees[begin + f]] : 0, col, N,
                       node_time, edge_time, sorted, col_ok);
    if (!sorted) flags[kUnsorted] = 1;
    lo[f] = a, hi[f] = b;
  }
}

__global__ void pick_kernel(const int64_t* found, int64_t hop, uint64_t key, const int64_t* lo, const int64_t* hi,
                            const int64_t* end_of, int64_t count, bool replace, EdgeWeights weight, int64_t* picks,
                            double* scratch, int64_t* flags) {
  const int64_t begin = found[0], F = found[1] - begin;
  TORCHPLUG_GRID_STRIDE_LOOP(f, F) {
    const int64_t start = f == 0 ? 0 : end_of[f - 1];
    Stream s(key, static_cast<uint64_t>(hop), static_cast<uint64_t>(begin + f));
    if (!pick(picks + start, scratch == nullptr ? nullptr : scratch + start, lo[f], hi[f], end_of[f] - start, count,
              replace, weight, s)) {
      flags[kZeroWeights] = 1;
    }
  }
}

// The frontier position of pick j: the first f with end_of[f] > j (past the
// frontier end_of holds the picks' total, so any F_cap >= F finds it).
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
__global__ void insert_picks_kernel(const int64_t* picks, const int64_t* end_of, int64_t F_cap, const int64_t* found,
                                    const int64_t* trees, const index_t* col, int64_t N, bool disjoint, Table t,
                                    int64_t* slot_of) {
  const int64_t P = total_of(end_of, F_cap);
  TORCHPLUG_GRID_STRIDE_LOOP(j, P) {
    const int64_t c = col[picks[j]];
    if (c < 0 || c >= N) {
      slot_of[j] = kEmpty;
      continue;
    }
    const int64_t slot = insert(t, disjoint ? trees[found[0] + source_of(j, end_of, F_cap)] * N + c : c);
    slot_of[j] = slot;
    if (t.local[slot] == kEmpty) atomicMin(t.first + slot, static_cast<unsigned long long>(j));
  }
}

// 1 where pick j is a kept edge; 1 in is_new where it found its node first.
__global__ void mark_kernel(int64_t P_cap, const int64_t* end_of, int64_t F_cap, const int64_t* slot_of, Table t,
                            int64_t* kept, int64_t* is_new) {
  const int64_t P = total_of(end_of, F_cap);
  TORCHPLUG_GRID_STRIDE_LOOP(j, P_cap) {
    const int64_t slot = j < P ? slot_of[j] : kEmpty;
    kept[j] = slot != kEmpty;
    is_new[j] = slot != kEmpty && t.local[slot] == kEmpty && t.first[slot] == static_cast<unsigned long long>(j);
  }
}

// The hop's totals from its scans: found[2], where the next hop's new nodes
// start, and the hop's kept edges. One thread.
__global__ void tally_kernel(int64_t P_cap, const int64_t* new_end, const int64_t* kept_end, int64_t* found,
                             int64_t* kept) {
  if (threadIdx.x != 0) return;
  found[2] = found[1] + total_of(new_end, P_cap);
  *kept = total_of(kept_end, P_cap);
}

template <typename index_t>
__global__ void number_kernel(const int64_t* slot_of, const int64_t* new_end, const int64_t* picks,
                              const int64_t* end_of, int64_t F_cap, const int64_t* found, const index_t* col, Table t,
                              int64_t* nodes, int64_t* trees) {
  const int64_t P = total_of(end_of, F_cap);
  TORCHPLUG_GRID_STRIDE_LOOP(j, P) {
    const int64_t slot = slot_of[j];
    if (slot == kEmpty || t.local[slot] != kEmpty || t.first[slot] != static_cast<unsigned long long>(j)) continue;
    const int64_t n = found[1] + new_end[j] - 1;
    nodes[n] = col[picks[j]];
    if (trees != nullptr) trees[n] = trees[found[0] + source_of(j, end_of, F_cap)];
    t.local[slot] = n;  // read by the next kernel only: no pick of this hop races on it
  }
}

__global__ void edges_kernel(const int64_t* slot_of, const int64_t* kept_end, const int64_t* picks,
                             const int64_t* end_of, int64_t F_cap, const int64_t* found, Table t, int64_t* rows,
                             int64_t* cols, int64_t* ids) {
  const int64_t P = total_of(end_of, F_cap);
  TORCHPLUG_GRID_STRIDE_LOOP(j, P) {
    const int64_t slot = slot_of[j];
    if (slot == kEmpty) continue;
    const int64_t e = kept_end[j] - 1;
    rows[e] = found[0] + source_of(j, end_of, F_cap);
    cols[e] = t.local[slot];
    ids[e] = picks[j];
  }
}

// The edges among the nodes [0, n) of a node set (their keys in the table,
// numbered; n is *size on the device, or n_cap where size is null): each
// node's edges to a node of the set, counted (into counts, 0 past n), then
// written from end_of[i - 1] in edge order (neighbor_sample's directed=False,
// subgraph).
template <typename index_t>
__global__ void induced_kernel(int64_t n_cap, const int64_t* size, const int64_t* nodes, const index_t* rowptr,
                               const index_t* col, int64_t N, int64_t E, Table t, const int64_t* end_of,
                               int64_t* counts, int64_t* rows, int64_t* cols, int64_t* ids) {
  const int64_t n = size == nullptr ? n_cap : *size;
  const bool count = counts != nullptr;
  TORCHPLUG_GRID_STRIDE_LOOP(i, n_cap) {
    if (i >= n) {
      if (count) counts[i] = 0;
      continue;
    }
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
  const int64_t* f = host.const_data_ptr<int64_t>();
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

// `buffer` with room for `size` entries, the ones it holds kept (copied on
// the stream when it grows).
void reserve(at::Tensor& buffer, int64_t size) {
  if (buffer.size(0) >= size) return;
  at::Tensor bigger = at::empty({size}, buffer.options());
  bigger.narrow(0, 0, buffer.size(0)).copy_(buffer);
  buffer = std::move(bigger);
}

// induced_kernel's count over the nodes [0, n) of `nodes` (n: *size on the
// device, or all of them where size is null), scanned: end_of [nodes.size(0)].
template <typename index_t>
at::Tensor count_edges_among(const at::Tensor& nodes, const int64_t* size, const index_t* rowptr, const index_t* col,
                             int64_t N, int64_t E, const Table& t) {
  const int64_t n_cap = nodes.size(0);
  at::Tensor counts = at::empty({n_cap}, nodes.options());
  core::launch(induced_kernel<index_t>, n_cap, n_cap, size, nodes.const_data_ptr<int64_t>(), rowptr, col, N, E, t,
               nullptr, counts.mutable_data_ptr<int64_t>(), nullptr, nullptr, nullptr);
  return at::cumsum(counts, 0);
}

// Those edges, `total` of them (end_of's last entry): (rows, cols, ids), int64.
template <typename index_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor> write_edges_among(const at::Tensor& nodes, const int64_t* size,
                                                                 const at::Tensor& end_of, int64_t total,
                                                                 const index_t* rowptr, const index_t* col, int64_t N,
                                                                 int64_t E, const Table& t) {
  const int64_t n_cap = nodes.size(0);
  at::Tensor r = at::empty({total}, nodes.options()), c = at::empty({total}, nodes.options()),
             e = at::empty({total}, nodes.options());
  if (total == 0) return {r, c, e};
  core::launch(induced_kernel<index_t>, n_cap, n_cap, size, nodes.const_data_ptr<int64_t>(), rowptr, col, N, E, t,
               end_of.const_data_ptr<int64_t>(), nullptr, r.mutable_data_ptr<int64_t>(), c.mutable_data_ptr<int64_t>(),
               e.mutable_data_ptr<int64_t>());
  return {r, c, e};
}

// The most picks a batch sizes its buffers for from host-side bounds alone
// (about 100 bytes of buffers a pick): the bounds multiply per hop, so deep
// or wide fanouts read each hop's picks back instead.
constexpr int64_t kBoundedKeys = int64_t{1} << 22;

// A hop's new nodes are at most its picks, and at most N distinct nodes
// where a key is a node (not disjoint).
int64_t new_nodes_bound(int64_t picks, int64_t N, bool disjoint) { return disjoint ? picks : std::min(picks, N); }

// Host-side bounds of a batch's sizes: each hop's picks (a frontier node
// picks at most `count`; a frontier is at most the previous hop's new
// nodes) and the sample's nodes, the seeds included.
struct Bounds {
  std::vector<int64_t> picks;
  int64_t nodes;
};

// The bounds from B, the fanouts and N alone; none where a fanout of -1
// bounds nothing or the picks of all hops pass kBoundedKeys.
std::optional<Bounds> bound_sizes(int64_t B, c10::ArrayRef<int64_t> fanouts, int64_t N, bool disjoint) {
  Bounds bounds{{}, B};
  int64_t frontier = B, picks = 0;
  for (const int64_t count : fanouts) {
    if (count < 0 || (count > 0 && frontier > (kBoundedKeys - picks) / count)) return std::nullopt;
    bounds.picks.push_back(frontier * count);
    picks += frontier * count;
    frontier = new_nodes_bound(frontier * count, N, disjoint);
    bounds.nodes += frontier;
  }
  return bounds;
}

// Where a batch keeps its sizes on the device, in one int64 tensor read back
// once at its end: the flags, the running node totals found[0, H + 2) (hop
// h's frontier is the nodes [found[h], found[h + 1]) of the node list), each
// hop's kept edges, and directed=False's induced edges.
struct SizeLayout {
  int64_t hops;

  int64_t found(int64_t h) const { return kFlags + h; }
  int64_t kept(int64_t h) const { return kFlags + hops + 2 + h; }
  int64_t induced() const { return kFlags + 2 * hops + 2; }
  int64_t length() const { return induced() + 1; }
};

template <typename index_t>
NeighborSample sample_cuda(const SampleProblem& p) {
  const char* op = kNeighborSample.name().c_str();
  check_graph_values(op, p.rowptr, p.col, p.seed.device());
  const auto longs = p.seed.options().dtype(at::kLong);
  const int64_t N = p.rowptr.size(0) - 1, E = p.col.size(0), B = p.seed.size(0);
  const int64_t H = static_cast<int64_t>(p.num_neighbors.size());
  const index_t* rowptr = p.rowptr.const_data_ptr<index_t>();
  const index_t* col = p.col.const_data_ptr<index_t>();
  const EdgeWeights weight = edge_weights(p.edge_weight);
  const int64_t* node_time = p.node_time ? p.node_time->const_data_ptr<int64_t>() : nullptr;
  const int64_t* edge_time = p.edge_time ? p.edge_time->const_data_ptr<int64_t>() : nullptr;

  // Buffers sized by the bounds: nothing is read back before the batch's
  // end. Without them each hop reads its pick count back and bounds the rest by it.
  const std::optional<Bounds> bounds = bound_sizes(B, p.num_neighbors, N, p.disjoint);
  const SizeLayout layout{H};
  at::Tensor sizes = at::zeros({layout.length()}, longs);
  sizes.narrow(0, layout.found(1), 1).fill_(B);
  int64_t* on_device = sizes.mutable_data_ptr<int64_t>();
  int64_t* flags = on_device;

  // The node list (its positions are the local ids: the seeds, then each
  // hop's new nodes) and, disjoint, each node's tree.
  const int64_t list_cap = bounds ? bounds->nodes : B;
  at::Tensor nodes = at::empty({list_cap}, longs), trees;
  nodes.narrow(0, 0, B).copy_(p.seed);
  if (p.disjoint) {
    trees = at::empty({list_cap}, longs);
    trees.narrow(0, 0, B).copy_(at::arange(B, longs));
  }
  at::Tensor root_time;
  if (p.seed_time) {
    root_time = *p.seed_time;
  } else if (p.node_time) {  // the seeds' own times, read where node_time lies
    root_time = p.node_time->index_select(0, p.seed.to(p.node_time->device())).to(p.seed.device());
  }
  std::vector<at::Tensor> rows, cols, ids;

  TableStorage table = TableStorage::make(list_cap, longs);
  core::launch(insert_seeds_kernel, B, B, nodes.const_data_ptr<int64_t>(), N, p.disjoint, table.view());
  core::launch(number_seeds_kernel, B, B, nodes.const_data_ptr<int64_t>(), N, p.disjoint, table.view(), nullptr);
  int64_t found_cap = B, F_cap = B;  // host-side bounds of found[h] and of the frontier
  for (int64_t h = 0; h < H; ++h) {
    const int64_t count = p.num_neighbors[h];
    int64_t* found = on_device + layout.found(h);
    at::Tensor lo = at::empty({F_cap}, longs), hi = at::empty({F_cap}, longs), counts = at::empty({F_cap}, longs);
    core::launch(window_kernel<index_t>, F_cap, F_cap, found, nodes.const_data_ptr<int64_t>(),
                 trees.defined() ? trees.const_data_ptr<int64_t>() : nullptr, rowptr, col, N, E, count, p.replace,
                 p.last, node_time, edge_time, root_time.defined() ? root_time.const_data_ptr<int64_t>() : nullptr,
                 lo.mutable_data_ptr<int64_t>(), hi.mutable_data_ptr<int64_t>(), counts.mutable_data_ptr<int64_t>(),
                 flags);
    const at::Tensor end_of = at::cumsum(counts, 0);
    const int64_t P_cap = bounds ? bounds->picks[h] : last_of(end_of);
    at::Tensor picks = at::empty({P_cap}, longs);
    at::Tensor scratch = weight.present() && !p.replace ? at::empty({P_cap}, longs.dtype(at::kDouble)) : at::Tensor();
    core::launch(pick_kernel, F_cap, found, h, p.key, lo.const_data_ptr<int64_t>(), hi.const_data_ptr<int64_t>(),
                 end_of.const_data_ptr<int64_t>(), count, p.replace, weight, picks.mutable_data_ptr<int64_t>(),
                 scratch.defined() ? scratch.mutable_data_ptr<double>() : nullptr, flags);

    const int64_t fresh_cap = new_nodes_bound(P_cap, N, p.disjoint);
    reserve(nodes, found_cap + fresh_cap);
    if (p.disjoint) reserve(trees, found_cap + fresh_cap);
    ensure(table, found_cap + fresh_cap);
    const Table t = table.view();
    at::Tensor slot_of = at::empty({P_cap}, longs), kept = at::empty({P_cap}, longs);
    at::Tensor is_new = at::empty({P_cap}, longs);
    core::launch(insert_picks_kernel<index_t>, P_cap, picks.const_data_ptr<int64_t>(),
                 end_of.const_data_ptr<int64_t>(), F_cap, found,
                 trees.defined() ? trees.const_data_ptr<int64_t>() : nullptr, col, N, p.disjoint, t,
                 slot_of.mutable_data_ptr<int64_t>());
    core::launch(mark_kernel, P_cap, P_cap, end_of.const_data_ptr<int64_t>(), F_cap, slot_of.const_data_ptr<int64_t>(),
                 t, kept.mutable_data_ptr<int64_t>(), is_new.mutable_data_ptr<int64_t>());
    const at::Tensor new_end = at::cumsum(is_new, 0), kept_end = at::cumsum(kept, 0);
    core::launch(tally_kernel, 1, P_cap, new_end.const_data_ptr<int64_t>(), kept_end.const_data_ptr<int64_t>(), found,
                 on_device + layout.kept(h));
    core::launch(number_kernel<index_t>, P_cap, slot_of.const_data_ptr<int64_t>(), new_end.const_data_ptr<int64_t>(),
                 picks.const_data_ptr<int64_t>(), end_of.const_data_ptr<int64_t>(), F_cap, found, col, t,
                 nodes.mutable_data_ptr<int64_t>(), trees.defined() ? trees.mutable_data_ptr<int64_t>() : nullptr);
    if (p.directed) {
      at::Tensor r = at::empty({P_cap}, longs), c = at::empty({P_cap}, longs), e = at::empty({P_cap}, longs);
      core::launch(edges_kernel, P_cap, slot_of.const_data_ptr<int64_t>(), kept_end.const_data_ptr<int64_t>(),
                   picks.const_data_ptr<int64_t>(), end_of.const_data_ptr<int64_t>(), F_cap, found, t,
                   r.mutable_data_ptr<int64_t>(), c.mutable_data_ptr<int64_t>(), e.mutable_data_ptr<int64_t>());
      rows.push_back(r), cols.push_back(c), ids.push_back(e);
    }
    found_cap += fresh_cap, F_cap = fresh_cap;
  }

  const int64_t* all_found = on_device + layout.found(H + 1);
  at::Tensor induced_end;
  if (!p.directed) {
    induced_end = count_edges_among<index_t>(nodes, all_found, rowptr, col, N, E, table.view());
    if (nodes.size(0) > 0) sizes.narrow(0, layout.induced(), 1).copy_(induced_end.narrow(0, -1, 1));
  }
  const at::Tensor host = sizes.cpu();  // the one read-back of a bounded batch
  raise_flags(op, host.narrow(0, 0, kFlags));
  const int64_t* size = host.const_data_ptr<int64_t>();
  std::vector<int64_t> nodes_per_hop, edges_per_hop;
  for (int64_t h = 0; h <= H; ++h) nodes_per_hop.push_back(size[layout.found(h + 1)] - size[layout.found(h)]);
  if (p.directed) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kept = size[layout.kept(h)];
      edges_per_hop.push_back(kept);
      rows[h] = rows[h].narrow(0, 0, kept), cols[h] = cols[h].narrow(0, 0, kept), ids[h] = ids[h].narrow(0, 0, kept);
    }
  } else {
    const auto [r, c, e] = write_edges_among<index_t>(nodes, all_found, induced_end, size[layout.induced()], rowptr,
                                                      col, N, E, table.view());
    rows = {r}, cols = {c}, ids = {e};
  }

  const int64_t total = size[layout.found(H + 1)];
  const auto dtype = p.rowptr.scalar_type();
  const auto joined = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, longs.dtype(dtype)) : at::cat(parts).to(dtype);
  };
  at::Tensor node_id = nodes.narrow(0, 0, total).to(dtype);
  if (p.disjoint) node_id = at::stack({trees.narrow(0, 0, total).to(dtype), node_id}, 1);
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
  at::Tensor flags = at::zeros({kFlags}, nodes.options());
  core::launch(insert_seeds_kernel, n, n, nodes.const_data_ptr<int64_t>(), N, false, table.view());
  core::launch(number_seeds_kernel, n, n, nodes.const_data_ptr<int64_t>(), N, false, table.view(),
               flags.mutable_data_ptr<int64_t>() + kRepeatedNode);
  raise_flags(op, flags);
  const index_t* rowptr = p.rowptr.const_data_ptr<index_t>();
  const index_t* col = p.col.const_data_ptr<index_t>();
  const at::Tensor end_of = count_edges_among<index_t>(nodes, nullptr, rowptr, col, N, E, table.view());
  const auto [rows, cols, ids] =
      write_edges_among<index_t>(nodes, nullptr, end_of, last_of(end_of), rowptr, col, N, E, table.view());
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
