// The sampler plugin: definitions (schemas in sampler_schema.h), the C++ API,
// the checks, and the registration of the CPU kernels (sampler_cpu.cpp) and
// of random_walk's Meta kernel (the other two ops' result sizes depend on
// the values sampled). The checks read no more than the kernels do: the
// seeds here, the rowptr entries and edges the kernels visit there (a
// product-sized graph checked whole would cost more than a batch's sampling).

#include "sampler.h"

#include "sampler_kernel.h"
#include "torchplug/core/checks.h"
#include "torchplug/core/library.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/stack.h>

#include <algorithm>
#include <limits>
#include <string>

namespace torchplug {
namespace sampler_detail {
namespace {

using core::NamedTensor;

// A graph tensor lies on the seeds' device or, for seeds on a GPU, in pinned
// host memory: the CUDA kernels read it there through unified addressing
// (zero-copy; every access crosses PCIe).
void check_reachable(const char* op, NamedTensor graph, NamedTensor seeds) {
  const at::Tensor& g = *graph.second;
  const at::Tensor& s = *seeds.second;
  if (g.device() == s.device()) return;
  // An empty tensor has no memory to pin (pin_memory() leaves it unpinned), and nothing is read from it.
  const bool pinned = (g.is_pinned() && g.is_contiguous()) || g.numel() == 0;
  TORCH_CHECK(s.is_cuda() && g.is_cpu() && pinned, op, ": argument '", graph.first, "' is on ", g.device(), " and '",
              seeds.first, "' on ", s.device(),
              ": the graph lies on the seeds' device or, for seeds on a GPU, in contiguous pinned host memory "
              "(Tensor.pin_memory())");
}

// The seeds (1-D, values in [0, N)), in the graph's index dtype, on a device
// that reaches the graph.
void check_seeds(const char* op, const at::Tensor& rowptr, const at::Tensor& col, NamedTensor seeds) {
  const at::Tensor& seed = *seeds.second;
  check_reachable(op, TORCHPLUG_ARG(rowptr), seeds);
  check_reachable(op, TORCHPLUG_ARG(col), seeds);
  core::check_same_dtype(op, TORCHPLUG_ARG(rowptr), seeds);
  TORCH_CHECK(seed.dim() == 1, op, ": argument '", seeds.first, "' must be 1-D, got shape ", seed.sizes());
  core::check_index_range(op, seeds.first, core::index_bounds(seed.to(at::kLong)), rowptr.size(0) - 1);
}

void check_times(const char* op, const char* arg, const OptTensor& t, int64_t size, const char* size_name,
                 const at::Tensor& like) {
  if (!t) return;
  core::check_same_device(op, {TORCHPLUG_ARG(like), {arg, &*t}});
  core::check_dtype(op, arg, *t, at::kLong);
  TORCH_CHECK(t->dim() == 1 && t->size(0) == size, op, ": argument '", arg, "' of shape ", t->sizes(),
              " must be [", size, "] (", size_name, ")");
}

}  // namespace

void check_graph(const char* op, const at::Tensor& rowptr, const at::Tensor& col) {
  core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col)});
  core::check_dtype_in(op, "rowptr", rowptr, kIndexDtypes);
  core::check_same_dtype(op, TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col));
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.size(0) >= 1, op,
              ": argument 'rowptr' must be 1-D with at least one value, got shape ", rowptr.sizes());
  TORCH_CHECK(col.dim() == 1, op, ": argument 'col' must be 1-D, got shape ", col.sizes());
  const at::Tensor ends = at::stack({rowptr[0], rowptr[-1]}).to(at::kLong).cpu();  // one read on a device
  TORCH_CHECK_INDEX(ends[0].item<int64_t>() == 0 && ends[1].item<int64_t>() == col.size(0), op,
                    ": argument 'rowptr' must start at 0 and end at E = col.size(0) = ", col.size(0), ", got ",
                    ends[0].item<int64_t>(), " and ", ends[1].item<int64_t>());
}

void check_edges(const char* op, const at::Tensor& rowptr, const at::Tensor& col, c10::IntArrayRef num_neighbors,
                 const OptTensor& edge_time, const OptTensor& edge_weight) {
  check_graph(op, rowptr, col);
  const int64_t E = col.size(0);
  for (size_t h = 0; h < num_neighbors.size(); ++h) {
    TORCH_CHECK(num_neighbors[h] >= -1, op, ": argument 'num_neighbors' holds ", num_neighbors[h], " at hop ", h,
                ": a fanout is at least 0, or -1 for every neighbour");
  }
  check_times(op, "edge_time", edge_time, E, "E = col.size(0)", rowptr);
  if (edge_weight) {
    core::check_same_device(op, {TORCHPLUG_ARG(rowptr), {"edge_weight", &*edge_weight}});
    core::check_dtype_in(op, "edge_weight", *edge_weight, {at::kFloat, at::kDouble});
    TORCH_CHECK(edge_weight->dim() == 1 && edge_weight->size(0) == E, op, ": argument 'edge_weight' of shape ",
                edge_weight->sizes(), " must be [", E, "] (E = col.size(0))");
  }
}

uint64_t draw_key(const std::optional<at::Generator>& generator, const at::Device& device) {
  const at::Device on = generator ? generator->device() : device;
  const at::Tensor key = at::randint(std::numeric_limits<int64_t>::max(), {1}, generator,
                                     at::TensorOptions().dtype(at::kLong).device(on));
  return static_cast<uint64_t>(key.item<int64_t>());
}

SampleProblem plan_neighbor_sample(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                                   c10::IntArrayRef num_neighbors, const OptTensor& node_time,
                                   const OptTensor& edge_time, const OptTensor& seed_time,
                                   const OptTensor& edge_weight, bool csc, bool replace, bool directed,
                                   bool disjoint, c10::string_view temporal_strategy, bool return_edge_id,
                                   const std::optional<at::Generator>& generator) {
  const char* op = kNeighborSample.name().c_str();
  check_edges(op, rowptr, col, num_neighbors, edge_time, edge_weight);
  check_seeds(op, rowptr, col, TORCHPLUG_ARG(seed));
  for (const auto& [name, t] : {std::pair{"node_time", &node_time}, std::pair{"edge_time", &edge_time},
                                std::pair{"edge_weight", &edge_weight}}) {
    if (*t) check_reachable(op, {name, &**t}, TORCHPLUG_ARG(seed));
  }
  TORCH_CHECK(temporal_strategy == "uniform" || temporal_strategy == "last", op,
              ": argument 'temporal_strategy' must be \"uniform\" or \"last\", got \"", std::string(temporal_strategy),
              "\"");
  check_times(op, "node_time", node_time, rowptr.size(0) - 1, "N = rowptr.size(0) - 1", rowptr);
  check_times(op, "seed_time", seed_time, seed.size(0), "one per seed", seed);
  const bool temporal = node_time || edge_time;
  TORCH_CHECK(!(node_time && edge_time), op, ": arguments 'node_time' and 'edge_time' exclude each other");
  TORCH_CHECK(!temporal || disjoint, op, ": temporal sampling (node_time or edge_time) needs disjoint=True");
  TORCH_CHECK(!edge_time || seed_time, op, ": argument 'edge_time' needs 'seed_time'");
  TORCH_CHECK(!seed_time || temporal, op, ": argument 'seed_time' needs 'node_time' or 'edge_time'");
  TORCH_CHECK(directed || !disjoint, op, ": directed=False (the induced subgraph) takes no disjoint=True");
  TORCH_CHECK(!edge_weight || !temporal, op, ": argument 'edge_weight' takes no temporal sampling");
  const auto contiguous = [](const OptTensor& t) { return t ? OptTensor(t->contiguous()) : std::nullopt; };
  return {rowptr.contiguous(),
          col.contiguous(),
          seed.contiguous(),
          num_neighbors.vec(),
          contiguous(node_time),
          contiguous(edge_time),
          contiguous(seed_time),
          contiguous(edge_weight),
          csc,
          replace,
          directed,
          disjoint,
          temporal_strategy == "last",
          return_edge_id,
          draw_key(generator, seed.device())};
}

WalkProblem plan_random_walk(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                             int64_t walk_length, double p, double q,
                             const std::optional<at::Generator>& generator) {
  const char* op = kRandomWalk.name().c_str();
  check_graph(op, rowptr, col);
  check_seeds(op, rowptr, col, TORCHPLUG_ARG(seed));
  TORCH_CHECK(walk_length >= 0, op, ": argument 'walk_length' must be at least 0, got ", walk_length);
  TORCH_CHECK(p > 0 && q > 0, op, ": arguments 'p' and 'q' must be positive, got p=", p, " q=", q);
  return {rowptr.contiguous(), col.contiguous(), seed.contiguous(), walk_length, p, q,
          draw_key(generator, seed.device())};
}

void check_gather_rows(const at::Tensor& x, const at::Tensor& index) {
  const char* op = kGatherRows.name().c_str();
  kGatherRows.check_dtypes({TORCHPLUG_ARG(x)});
  core::check_dtype_in(op, "index", index, kIndexDtypes);
  TORCH_CHECK(x.dim() >= 1, op, ": argument 'x' must have at least one dimension, got a scalar");
  TORCH_CHECK(index.dim() == 1, op, ": argument 'index' must be 1-D, got shape ", index.sizes());
  check_reachable(op, TORCHPLUG_ARG(x), TORCHPLUG_ARG(index));
}

SubgraphProblem plan_subgraph(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& nodes,
                              bool return_edge_id) {
  const char* op = kSubgraph.name().c_str();
  check_graph(op, rowptr, col);
  check_seeds(op, rowptr, col, TORCHPLUG_ARG(nodes));
  return {rowptr.contiguous(), col.contiguous(), nodes.contiguous(), return_edge_id};
}

namespace {

using SampleResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, OptTensor, std::vector<int64_t>,
                                std::vector<int64_t>>;

SampleResult neighbor_sample_kernel(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                                    c10::IntArrayRef num_neighbors, const OptTensor& node_time,
                                    const OptTensor& edge_time, const OptTensor& seed_time,
                                    const OptTensor& edge_weight, bool csc, bool replace, bool directed,
                                    bool disjoint, c10::string_view temporal_strategy, bool return_edge_id,
                                    const std::optional<at::Generator>& generator) {
  core::check_cpu(kNeighborSample.name().c_str(), "rowptr", rowptr);
  NeighborSample s = neighbor_sample_cpu(plan_neighbor_sample(rowptr, col, seed, num_neighbors, node_time, edge_time,
                                                              seed_time, edge_weight, csc, replace, directed,
                                                              disjoint, temporal_strategy, return_edge_id,
                                                              generator));
  return {s.row, s.col, s.node_id, s.edge_id, s.num_sampled_nodes_per_hop, s.num_sampled_edges_per_hop};
}

at::Tensor random_walk_kernel(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                              int64_t walk_length, double p, double q, const std::optional<at::Generator>& generator) {
  core::check_cpu(kRandomWalk.name().c_str(), "rowptr", rowptr);
  return random_walk_cpu(plan_random_walk(rowptr, col, seed, walk_length, p, q, generator));
}

at::Tensor random_walk_meta(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                            int64_t walk_length, double p, double q, const std::optional<at::Generator>& /*generator*/) {
  const char* op = kRandomWalk.name().c_str();
  core::check_same_device(op, {TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(col), TORCHPLUG_ARG(seed)});
  core::check_dtype_in(op, "rowptr", rowptr, kIndexDtypes);
  core::check_same_dtype(op, TORCHPLUG_ARG(rowptr), TORCHPLUG_ARG(seed));
  TORCH_CHECK(seed.dim() == 1, op, ": argument 'seed' must be 1-D, got shape ", seed.sizes());
  TORCH_CHECK(walk_length >= 0, op, ": argument 'walk_length' must be at least 0, got ", walk_length);
  TORCH_CHECK(p > 0 && q > 0, op, ": arguments 'p' and 'q' must be positive, got p=", p, " q=", q);
  return at::empty_symint({seed.sym_size(0), walk_length + 1}, seed.options());
}

std::tuple<at::Tensor, at::Tensor, OptTensor> subgraph_kernel(const at::Tensor& rowptr, const at::Tensor& col,
                                                              const at::Tensor& nodes, bool return_edge_id) {
  core::check_cpu(kSubgraph.name().c_str(), "rowptr", rowptr);
  return subgraph_cpu(plan_subgraph(rowptr, col, nodes, return_edge_id));
}

at::Tensor gather_rows_kernel(const at::Tensor& x, const at::Tensor& index) {
  check_gather_rows(x, index);
  core::check_index_range(kGatherRows.name().c_str(), "index", core::index_bounds(index.to(at::kLong)), x.size(0));
  return x.index_select(0, index);
}

at::Tensor gather_rows_meta(const at::Tensor& x, const at::Tensor& index) {
  check_gather_rows(x, index);
  std::vector<c10::SymInt> shape = x.sym_sizes().vec();
  shape[0] = index.sym_size(0);
  return at::empty_symint(shape, index.options().dtype(x.scalar_type()));
}

}  // namespace
}  // namespace sampler_detail

NeighborSample neighbor_sample(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed,
                               const std::vector<int64_t>& num_neighbors, const NeighborSampleOptions& o) {
  using namespace sampler_detail;
  static const auto op = core::find_op<SampleResult(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::IntArrayRef, const OptTensor&, const OptTensor&,
      const OptTensor&, const OptTensor&, bool, bool, bool, bool, c10::string_view, bool,
      const std::optional<at::Generator>&)>(kNeighborSample);
  auto [row, out_col, node_id, edge_id, nodes, edges] = op.call(
      rowptr, col, seed, num_neighbors, o.node_time, o.edge_time, o.seed_time, o.edge_weight, o.csc, o.replace,
      o.directed, o.disjoint, c10::string_view(o.temporal_strategy.data(), o.temporal_strategy.size()),
      o.return_edge_id, o.generator);
  return {row, out_col, node_id, edge_id, nodes, edges};
}

at::Tensor random_walk(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& seed, int64_t walk_length,
                       double p, double q, const std::optional<at::Generator>& generator) {
  static const auto op =
      core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, double, double,
                               const std::optional<at::Generator>&)>(sampler_detail::kRandomWalk);
  return op.call(rowptr, col, seed, walk_length, p, q, generator);
}

std::tuple<at::Tensor, at::Tensor, std::optional<at::Tensor>> subgraph(const at::Tensor& rowptr,
                                                                      const at::Tensor& col,
                                                                      const at::Tensor& nodes,
                                                                      bool return_edge_id) {
  static const auto op = core::find_op<std::tuple<at::Tensor, at::Tensor, std::optional<at::Tensor>>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, bool)>(sampler_detail::kSubgraph);
  return op.call(rowptr, col, nodes, return_edge_id);
}

at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& index) {
  static const auto op = core::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(sampler_detail::kGatherRows);
  return op.call(x, index);
}

}  // namespace torchplug

TORCHPLUG_LIBRARY(torchplug, m) {
  using namespace torchplug::sampler_detail;
  m.define(kNeighborSample);
  m.define(kRandomWalk);
  m.define(kSubgraph);
  m.define(kGatherRows);
}

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  using namespace torchplug::sampler_detail;
  m.impl(kNeighborSample, &neighbor_sample_kernel);
  m.impl(kRandomWalk, &random_walk_kernel);
  m.impl(kSubgraph, &subgraph_kernel);
  m.impl(kGatherRows, &gather_rows_kernel);
}

TORCHPLUG_LIBRARY_IMPL(torchplug, Meta, m) {
  m.impl(torchplug::sampler_detail::kRandomWalk, &torchplug::sampler_detail::random_walk_meta);
  m.impl(torchplug::sampler_detail::kGatherRows, &torchplug::sampler_detail::gather_rows_meta);
}
