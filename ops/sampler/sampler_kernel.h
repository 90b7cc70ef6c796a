#pragma once

// Internal to the sampler plugin: the checked problems each kernel takes, and
// the counter-based random streams every kernel draws from.

#include "sampler.h"
#include "sampler_schema.h"

#include <c10/macros/Macros.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/string_view.h>

#include <cstdint>

namespace torchplug::sampler_detail {

using OptTensor = std::optional<at::Tensor>;

// A counter-based stream of random numbers: (key, a, b) name it, so that
// every seed, hop and frontier node draws its own numbers whatever thread or
// order it runs in. The state steps by the golden ratio and is mixed by
// splitmix64's finaliser.
class Stream {
 public:
  C10_HOST_DEVICE Stream(uint64_t key, uint64_t a, uint64_t b = 0)
      : state_(mix(key ^ mix(a * kGolden + mix(b + kOffset)))) {}

  C10_HOST_DEVICE uint64_t next() {
    state_ += kGolden;
    return mix(state_);
  }

  // Uniform in [0, n) for n > 0: the high word of next() * n (bias under n / 2^64).
  C10_HOST_DEVICE uint64_t below(uint64_t n) {
#ifdef __CUDA_ARCH__
    return __umul64hi(next(), n);
#else
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
#endif
  }

  // Uniform in (0, 1).
  C10_HOST_DEVICE double unit() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

 private:
  static constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  static constexpr uint64_t kOffset = 0x632be59bd9b4e019ULL;

  C10_HOST_DEVICE static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t state_;
};

// One 64-bit key drawn from `generator`, or from `device`'s default generator.
uint64_t draw_key(const std::optional<at::Generator>& generator, const at::Device& device);

// neighbor_sample's arguments, checked.
struct SampleProblem {
  at::Tensor rowptr, col, seed;
  std::vector<int64_t> num_neighbors;
  OptTensor node_time, edge_time, seed_time, edge_weight;
  bool csc, replace, directed, disjoint, last, return_edge_id;
  uint64_t key;
};

struct WalkProblem {
  at::Tensor rowptr, col, seed;
  int64_t walk_length;
  double p, q;
  uint64_t key;
};

struct SubgraphProblem {
  at::Tensor rowptr, col, nodes;
  bool return_edge_id;
};

// The checks (sampler.cpp), errors naming `op`: a CSR graph (rowptr [N + 1]
// starting at 0 and ending at E, col [E]; int32 or int64), and with it the
// fanouts and the per-edge times and weights neighbor_sample takes.
void check_graph(const char* op, const at::Tensor& rowptr, const at::Tensor& col);
void check_edges(const char* op, const at::Tensor& rowptr, const at::Tensor& col, c10::IntArrayRef num_neighbors,
                 const OptTensor& edge_time, const OptTensor& edge_weight);

// The checked problems, each with its key drawn.
SampleProblem plan_neighbor_sample(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                                   c10::IntArrayRef num_neighbors, const OptTensor& node_time,
                                   const OptTensor& edge_time, const OptTensor& seed_time,
                                   const OptTensor& edge_weight, bool csc, bool replace, bool directed,
                                   bool disjoint, c10::string_view temporal_strategy, bool return_edge_id,
                                   const std::optional<at::Generator>& generator);
WalkProblem plan_random_walk(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                             int64_t walk_length, double p, double q, const std::optional<at::Generator>& generator);
SubgraphProblem plan_subgraph(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& nodes,
                              bool return_edge_id);

// gather_rows' checks: x (at least 1-D) reachable from the index (1-D,
// int32 or int64) and contiguous there; the values are the kernels'.
void check_gather_rows(const at::Tensor& x, const at::Tensor& index);

// The device kernels (sampler_cpu.cpp).
NeighborSample neighbor_sample_cpu(const SampleProblem& p);
at::Tensor random_walk_cpu(const WalkProblem& p);
std::tuple<at::Tensor, at::Tensor, OptTensor> subgraph_cpu(const SubgraphProblem& p);

}  // namespace torchplug::sampler_detail
