#pragma once

// The sampler plugin's ops, with pyg-lib's argument names, defaults and
// result order (pyg_lib.sampler) plus a generator. Their kernels register
// against these OpDefs; the defaults are spelled as the dispatcher prints them.

#include "torchplug/core/registry.h"

#include <c10/core/ScalarType.h>

#include <vector>

namespace torchplug::sampler_detail {

// The index dtypes: rowptr, col and the seeds share one, and so do the results.
inline const std::vector<c10::ScalarType> kIndexDtypes = {at::kInt, at::kLong};

inline const core::OpDef kNeighborSample{
    "torchplug::neighbor_sample(Tensor rowptr, Tensor col, Tensor seed, int[] num_neighbors, "
    "Tensor? node_time=None, Tensor? edge_time=None, Tensor? seed_time=None, Tensor? edge_weight=None, "
    "bool csc=False, bool replace=False, bool directed=True, bool disjoint=False, "
    "str temporal_strategy=\"uniform\", bool return_edge_id=True, Generator? generator=None) "
    "-> (Tensor, Tensor, Tensor, Tensor?, int[], int[])",
    kIndexDtypes,
    "Multi-hop neighbour sampling from seed nodes over a CSR graph (pyg-lib's neighbor_sample): "
    "(row, col, node_id, edge_id, nodes per hop, edges per hop)."};

// neighbor_sample over a heterogeneous graph: T edge types (a CSR each, from
// node type src_type[t] to dst_type[t]), K node types (seed[k], None without
// seeds), num_neighbors [T * hops] edge type by edge type; the time and
// weight lists are empty or one entry per node (edge) type. Results per edge
// type (row, col, edge_id; none without return_edge_id) and node type
// (node_id), and the counts [K * (hops + 1)] and [T * hops]. torchplug's
// hetero_neighbor_sample (sampler.py) takes pyg-lib's dictionaries.
inline const core::OpDef kHeteroNeighborSample{
    "torchplug::hetero_neighbor_sample(Tensor[] rowptr, Tensor[] col, int[] src_type, int[] dst_type, "
    "Tensor?[] seed, int[] num_neighbors, Tensor?[] node_time, Tensor?[] edge_time, Tensor?[] seed_time, "
    "Tensor?[] edge_weight, bool csc=False, bool replace=False, bool directed=True, bool disjoint=False, "
    "str temporal_strategy=\"uniform\", bool return_edge_id=True, Generator? generator=None) "
    "-> (Tensor[], Tensor[], Tensor[], Tensor[], int[], int[])",
    kIndexDtypes, "neighbor_sample over a heterogeneous graph, edge type by edge type (pyg-lib's hetero_neighbor_sample)."};

inline const core::OpDef kRandomWalk{
    "torchplug::random_walk(Tensor rowptr, Tensor col, Tensor seed, int walk_length, float p=1., float q=1., "
    "Generator? generator=None) -> Tensor",
    kIndexDtypes, "Random walks [S, walk_length + 1] from each seed, uniform or node2vec's (p, q)."};

inline const core::OpDef kSubgraph{
    "torchplug::subgraph(Tensor rowptr, Tensor col, Tensor nodes, bool return_edge_id=True) "
    "-> (Tensor, Tensor, Tensor?)",
    kIndexDtypes, "The subgraph a node set induces, as a CSR over the nodes' positions, with the edges' ids."};

// The dtypes gather_rows copies: its rows are copied as bytes.
inline const std::vector<c10::ScalarType> kRowDtypes = {
    at::kBool, at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kBFloat16, at::kFloat,
    at::kDouble, at::kComplexFloat, at::kComplexDouble};

inline const core::OpDef kGatherRows{
    "torchplug::gather_rows(Tensor x, Tensor index) -> Tensor", kRowDtypes,
    "x[index] on index's device, where x lies there or, for an index on a GPU, in pinned host memory "
    "(a mini-batch's features, read zero-copy)."};

}  // namespace torchplug::sampler_detail
