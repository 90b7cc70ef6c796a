#pragma once

// How neighbor_sample picks one frontier node's edges, written once for the
// CPU and CUDA kernels: the same stream gives the same picks on both.
//
//   int64_t k = window(...);      // the candidates [lo, hi) and the number of picks
//   pick(out, scratch, ...);      // the k picks, in pyg-lib's order
//
// Without weights: all candidates in order (a fanout of -1, or one at least
// the window without replacement), k uniform draws with replacement, or k
// distinct ones by Floyd's algorithm. With weights: draws by the weights'
// running sum with replacement; without, the k largest log(u) / w
// (Efraimidis-Spirakis), largest first, zero weights last.

#include "sampler_kernel.h"

#include <c10/macros/Macros.h>

#include <cmath>
#include <limits>

namespace torchplug::sampler_detail {

// Edge weights read where and as they are given (float32 or float64), as
// doubles: no E-sized converted copy per call, which for a graph in pinned
// host memory would also leave the pinned memory.
struct EdgeWeights {
  const void* data = nullptr;
  bool is_double = false;

  C10_HOST_DEVICE bool present() const { return data != nullptr; }
  C10_HOST_DEVICE double operator[](int64_t e) const {
    return is_double ? static_cast<const double*>(data)[e] : static_cast<const float*>(data)[e];
  }
};

inline EdgeWeights edge_weights(const OptTensor& weight) {
  if (!weight) return {};
  return {weight->const_data_ptr(), weight->scalar_type() == at::kDouble};
}

// Edge e's time for the temporal window: its neighbour's (node_time[col[e]])
// or its own (edge_time[e]). `col_ok` turns false for a column outside [0, N).
template <typename index_t>
C10_HOST_DEVICE inline int64_t edge_time_of(int64_t e, const index_t* col, int64_t N, const int64_t* node_time,
                                            const int64_t* edge_time, bool& col_ok) {
  if (node_time == nullptr) return edge_time[e];
  const int64_t c = col[e];
  if (c < 0 || c >= N) {
    col_ok = false;
    return 0;
  }
  return node_time[c];
}

// A frontier node's window: its edges [lo, hi), cut to those at most `cut`
// in time when temporal (a prefix, the neighbourhood being sorted; `sorted`
// turns false if its first time is later than its last), the last `count`
// of those for "last". Returns the number of picks.
template <typename index_t>
C10_HOST_DEVICE inline int64_t window(int64_t& lo, int64_t& hi, int64_t count, bool replace, bool temporal,
                                      bool last, int64_t cut, const index_t* col, int64_t N,
                                      const int64_t* node_time, const int64_t* edge_time, bool& sorted,
                                      bool& col_ok) {
  if (count == 0) hi = lo;
  if (temporal && lo < hi) {
    if (edge_time_of(lo, col, N, node_time, edge_time, col_ok) >
        edge_time_of(hi - 1, col, N, node_time, edge_time, col_ok)) {
      sorted = false;
    }
    int64_t low = lo, high = hi;  // the first edge later than the cut
    while (low < high) {
      const int64_t mid = low + (high - low) / 2;
      if (edge_time_of(mid, col, N, node_time, edge_time, col_ok) <= cut) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    hi = low;
    if (last && count >= 0 && hi - lo > count) lo = hi - count;
  }
  const int64_t pop = hi - lo;
  if (pop == 0) return 0;
  return count < 0 || (!replace && count >= pop) ? pop : count;
}

// Writes the k picks of the window [lo, hi) to out[0, k). `keys` (k
// doubles) is scratch for weighted picks without replacement. Returns false
// when weighted draws with replacement find the window's weights summing to 0,
// having written lo k times: a batch on the GPU raises only at its end, and
// its later kernels read the picks until then.
C10_HOST_DEVICE inline bool pick(int64_t* out, double* keys, int64_t lo, int64_t hi, int64_t k, int64_t count,
                                 bool replace, EdgeWeights weight, Stream& s) {
  const int64_t pop = hi - lo;
  if (k == 0) return true;
  if (count < 0 || (!replace && k == pop)) {  // all of them, in order
    for (int64_t j = 0; j < k; ++j) out[j] = lo + j;
    return true;
  }
  if (weight.present() && replace) {  // each draw: where u * total falls in the running sum
    double total = 0;
    for (int64_t e = lo; e < hi; ++e) total += weight[e];
    if (!(total > 0)) {
      for (int64_t j = 0; j < k; ++j) out[j] = lo;
      return false;
    }
    for (int64_t j = 0; j < k; ++j) {
      const double u = s.unit() * total;
      double sum = 0;
      int64_t e = lo;
      for (; e < hi - 1; ++e) {
        sum += weight[e];
        if (u < sum) break;
      }
      while (e > lo && weight[e] <= 0) --e;  // rounding past the end lands on the last weighted edge
      out[j] = e;
    }
    return true;
  }
  if (weight.present()) {  // the k largest keys, kept sorted (largest first; ties: the earlier edge)
    int64_t held = 0;
    for (int64_t e = lo; e < hi; ++e) {
      const double w = weight[e];
      const double key = w > 0 ? std::log(s.unit()) / w : -std::numeric_limits<double>::infinity();
      if (held == k && !(key > keys[k - 1])) continue;
      int64_t at = held < k ? held++ : k - 1;
      while (at > 0 && key > keys[at - 1]) {
        keys[at] = keys[at - 1], out[at] = out[at - 1];
        --at;
      }
      keys[at] = key, out[at] = e;
    }
    return true;
  }
  if (replace) {
    for (int64_t j = 0; j < k; ++j) out[j] = lo + static_cast<int64_t>(s.below(pop));
    return true;
  }
  // k distinct of pop, uniform: Floyd's algorithm, the earlier picks scanned.
  for (int64_t j = pop - k, n = 0; j < pop; ++j, ++n) {
    const int64_t r = static_cast<int64_t>(s.below(j + 1));
    bool seen = false;
    for (int64_t m = 0; m < n && !seen; ++m) seen = out[m] == lo + r;
    out[n] = lo + (seen ? j : r);
  }
  return true;
}

}  // namespace torchplug::sampler_detail
