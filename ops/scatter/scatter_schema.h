#pragma once

// The scatter plugin's ops: scatter, segment_csr, segment_coo (one op per
// reduction of core/reduce/policy.h, functional and in place) and the gathers.
// Every kernel, Meta included, registers against these OpDefs; the C++ API
// and the autograd kernels find the ops from them. Errors of an in-place form
// that reduces (scatter_<r>_, segment_<r>_*_) name its functional op, which
// the friendly functions call it for with out=.

#include "torchplug/core/reduce/family.h"
#include "torchplug/core/registry.h"

#include <c10/core/ScalarType.h>

#include <vector>

namespace torchplug::scatter_detail {

// The dtypes of src every op of the plugin takes.
inline const std::vector<c10::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat,
                                                     at::kDouble, at::kInt,     at::kLong};

// scatter_<r>(src, index, dim, dim_size) -> out (min, max: (out, arg))
inline const core::AllReductionOps kScatter{{
    core::OpDef{"torchplug::scatter_sum(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor",
                kDtypes, "Sums slices of src into the output slots named by index along dim."},
    core::OpDef{"torchplug::scatter_mean(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor",
                kDtypes, "Averages slices of src into the output slots named by index along dim."},
    core::OpDef{"torchplug::scatter_mul(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor",
                kDtypes, "Multiplies slices of src into the output slots named by index along dim."},
    core::OpDef{"torchplug::scatter_min(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)",
                kDtypes, "Minimum of the slices of src in each output slot, with its position (arg)."},
    core::OpDef{"torchplug::scatter_max(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)",
                kDtypes, "Maximum of the slices of src in each output slot, with its position (arg)."},
}};

// scatter_<r>_(out, src, index, dim): reduces into out, its values taking part
inline const core::AllReductionOps kScatterInplace{{
    core::OpDef{"torchplug::scatter_sum_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> ()",
                kDtypes, "In-place scatter_sum: reduces into out, whose values take part."},
    core::OpDef{"torchplug::scatter_mean_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> ()",
                kDtypes, "In-place scatter_mean: reduces into out, whose values take part."},
    core::OpDef{"torchplug::scatter_mul_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> ()",
                kDtypes, "In-place scatter_mul: reduces into out, whose values take part."},
    core::OpDef{"torchplug::scatter_min_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> Tensor",
                kDtypes, "In-place scatter_min: reduces into out, whose values take part."},
    core::OpDef{"torchplug::scatter_max_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> Tensor",
                kDtypes, "In-place scatter_max: reduces into out, whose values take part."},
}};

// segment_<r>_csr(src, indptr) -> out (min, max: (out, arg))
inline const core::AllReductionOps kSegmentCsr{{
    core::OpDef{"torchplug::segment_sum_csr(Tensor src, Tensor indptr) -> Tensor",
                kDtypes, "Reduces (sum) each segment indptr[i] .. indptr[i + 1] of src along indptr.dim() - 1."},
    core::OpDef{"torchplug::segment_mean_csr(Tensor src, Tensor indptr) -> Tensor",
                kDtypes, "Reduces (mean) each segment indptr[i] .. indptr[i + 1] of src along indptr.dim() - 1."},
    core::OpDef{"torchplug::segment_mul_csr(Tensor src, Tensor indptr) -> Tensor",
                kDtypes, "Reduces (mul) each segment indptr[i] .. indptr[i + 1] of src along indptr.dim() - 1."},
    core::OpDef{"torchplug::segment_min_csr(Tensor src, Tensor indptr) -> (Tensor, Tensor)",
                kDtypes, "Reduces (min) each segment indptr[i] .. indptr[i + 1] of src along indptr.dim() - 1."},
    core::OpDef{"torchplug::segment_max_csr(Tensor src, Tensor indptr) -> (Tensor, Tensor)",
                kDtypes, "Reduces (max) each segment indptr[i] .. indptr[i + 1] of src along indptr.dim() - 1."},
}};

// segment_<r>_csr_(out, src, indptr): out overwritten
inline const core::AllReductionOps kSegmentCsrInplace{{
    core::OpDef{"torchplug::segment_sum_csr_(Tensor(a!) out, Tensor src, Tensor indptr) -> ()",
                kDtypes, "segment_sum_csr written into out."},
    core::OpDef{"torchplug::segment_mean_csr_(Tensor(a!) out, Tensor src, Tensor indptr) -> ()",
                kDtypes, "segment_mean_csr written into out."},
    core::OpDef{"torchplug::segment_mul_csr_(Tensor(a!) out, Tensor src, Tensor indptr) -> ()",
                kDtypes, "segment_mul_csr written into out."},
    core::OpDef{"torchplug::segment_min_csr_(Tensor(a!) out, Tensor src, Tensor indptr) -> Tensor",
                kDtypes, "segment_min_csr written into out."},
    core::OpDef{"torchplug::segment_max_csr_(Tensor(a!) out, Tensor src, Tensor indptr) -> Tensor",
                kDtypes, "segment_max_csr written into out."},
}};

// segment_<r>_coo(src, index, dim_size) -> out (min, max: (out, arg))
inline const core::AllReductionOps kSegmentCoo{{
    core::OpDef{"torchplug::segment_sum_coo(Tensor src, Tensor index, SymInt? dim_size=None) -> Tensor",
                kDtypes, "Reduces (sum) the runs of a sorted index along index.dim() - 1."},
    core::OpDef{"torchplug::segment_mean_coo(Tensor src, Tensor index, SymInt? dim_size=None) -> Tensor",
                kDtypes, "Reduces (mean) the runs of a sorted index along index.dim() - 1."},
    core::OpDef{"torchplug::segment_mul_coo(Tensor src, Tensor index, SymInt? dim_size=None) -> Tensor",
                kDtypes, "Reduces (mul) the runs of a sorted index along index.dim() - 1."},
    core::OpDef{"torchplug::segment_min_coo(Tensor src, Tensor index, SymInt? dim_size=None) -> (Tensor, Tensor)",
                kDtypes, "Reduces (min) the runs of a sorted index along index.dim() - 1."},
    core::OpDef{"torchplug::segment_max_coo(Tensor src, Tensor index, SymInt? dim_size=None) -> (Tensor, Tensor)",
                kDtypes, "Reduces (max) the runs of a sorted index along index.dim() - 1."},
}};

// segment_<r>_coo_(out, src, index): reduces into out, its values taking part
inline const core::AllReductionOps kSegmentCooInplace{{
    core::OpDef{"torchplug::segment_sum_coo_(Tensor(a!) out, Tensor src, Tensor index) -> ()",
                kDtypes, "In-place segment_sum_coo: reduces into out, whose values take part."},
    core::OpDef{"torchplug::segment_mean_coo_(Tensor(a!) out, Tensor src, Tensor index) -> ()",
                kDtypes, "In-place segment_mean_coo: reduces into out, whose values take part."},
    core::OpDef{"torchplug::segment_mul_coo_(Tensor(a!) out, Tensor src, Tensor index) -> ()",
                kDtypes, "In-place segment_mul_coo: reduces into out, whose values take part."},
    core::OpDef{"torchplug::segment_min_coo_(Tensor(a!) out, Tensor src, Tensor index) -> Tensor",
                kDtypes, "In-place segment_min_coo: reduces into out, whose values take part."},
    core::OpDef{"torchplug::segment_max_coo_(Tensor(a!) out, Tensor src, Tensor index) -> Tensor",
                kDtypes, "In-place segment_max_coo: reduces into out, whose values take part."},
}};

inline const core::OpDef kGatherCsr{
    "torchplug::gather_csr(Tensor src, Tensor indptr, SymInt? dim_size=None) -> Tensor", kDtypes,
    "Copies slice i of src to positions indptr[i] .. indptr[i + 1] along indptr.dim() - 1."};
inline const core::OpDef kGatherCsrInplace{"torchplug::gather_csr_(Tensor(a!) out, Tensor src, Tensor indptr) -> ()",
                                           kDtypes, "gather_csr written into out."};
inline const core::OpDef kGatherCoo{"torchplug::gather_coo(Tensor src, Tensor index) -> Tensor", kDtypes,
                                    "Copies slice index[j] of src to position j along index.dim() - 1."};
inline const core::OpDef kGatherCooInplace{"torchplug::gather_coo_(Tensor(a!) out, Tensor src, Tensor index) -> ()",
                                           kDtypes, "gather_coo written into out."};

}  // namespace torchplug::scatter_detail
