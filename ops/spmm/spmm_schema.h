#pragma once

// The spmm plugin's ops: spmm, one op per reduction it takes; the transpose
// its backward reads; the per-edge products (sddmm). Every kernel, Meta
// included, registers against these OpDefs.

#include "torchplug/core/reduce/family.h"
#include "torchplug/core/registry.h"

#include <c10/core/ScalarType.h>

#include <vector>

namespace torchplug::spmm_detail {

// The dtypes of x (spmm) and of a and b (sddmm).
inline const std::vector<c10::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};

using SpmmOps = core::ReductionOps<core::SumPolicy, core::MeanPolicy, core::MinPolicy, core::MaxPolicy>;

// spmm_<r>(rowptr, col, value, x, colptr, row, perm) -> out (min, max: (out, arg));
// value is [nnz] or, one weight per head of x [N, H, *], [nnz, H]
inline const SpmmOps kSpmm{{
    core::OpDef{"torchplug::spmm_sum(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? colptr=None, "
                "Tensor? row=None, Tensor? perm=None) -> Tensor",
                kDtypes, "Sparse (CSR) times dense with the sum of each row's weighted messages."},
    core::OpDef{"torchplug::spmm_mean(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? colptr=None, "
                "Tensor? row=None, Tensor? perm=None) -> Tensor",
                kDtypes, "Sparse (CSR) times dense with the mean of each row's weighted messages."},
    core::OpDef{"torchplug::spmm_min(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? colptr=None, "
                "Tensor? row=None, Tensor? perm=None) -> (Tensor, Tensor)",
                kDtypes, "Sparse (CSR) times dense with the min of each row's weighted messages."},
    core::OpDef{"torchplug::spmm_max(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? colptr=None, "
                "Tensor? row=None, Tensor? perm=None) -> (Tensor, Tensor)",
                kDtypes, "Sparse (CSR) times dense with the max of each row's weighted messages."},
}};

inline const core::OpDef kSpmmTranspose{
    "torchplug::spmm_transpose(Tensor rowptr, Tensor col, SymInt num_cols) -> (Tensor colptr, Tensor row, Tensor perm)",
    {at::kLong}, "A CSR's transpose (CSC) for spmm's gradients, built once by the caller."};

inline const core::OpDef kSddmm{
    "torchplug::sddmm(Tensor rowptr, Tensor col, Tensor a, Tensor b, bool mean=False, Tensor? colptr=None, "
    "Tensor? row=None, Tensor? perm=None, int heads=1) -> Tensor",
    kDtypes, "Per-edge (and per-head) dot products a[row] . b[col] over a CSR (spmm's value gradient)."};

}  // namespace torchplug::spmm_detail
