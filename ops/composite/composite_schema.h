#pragma once

// The composite plugin's ops: softmax, log_softmax, logsumexp and std over
// the groups an index names, softmax over a CSR's groups, and softmax's fused
// backward. Every kernel, Meta included, registers against these OpDefs.

#include "torchplug/core/registry.h"

#include <c10/core/ScalarType.h>

#include <vector>

namespace torchplug::composite_detail {

// The dtypes every composite takes: floating types (float16 and bfloat16
// computed in float32).
inline const std::vector<c10::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};

inline const core::OpDef kScatterSoftmax{
    "torchplug::scatter_softmax(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor", kDtypes,
    "Softmax of src within each group that index names along dim (one fused op)."};
inline const core::OpDef kScatterLogSoftmax{
    "torchplug::scatter_log_softmax(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor", kDtypes,
    "Log-softmax of src within each group that index names along dim."};
inline const core::OpDef kScatterLogsumexp{
    "torchplug::scatter_logsumexp(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor", kDtypes,
    "log(sum(exp(src))) of each group that index names along dim, computed stably."};
inline const core::OpDef kScatterLogsumexpInplace{
    "torchplug::scatter_logsumexp_(Tensor(a!) out, Tensor src, Tensor index, int dim=-1) -> ()", kDtypes,
    "In-place scatter_logsumexp: reduces into out, whose values take part."};
inline const core::OpDef kScatterStd{
    "torchplug::scatter_std(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None, bool unbiased=True) "
    "-> Tensor",
    kDtypes, "Standard deviation of each group that index names along dim (Welford)."};
inline const core::OpDef kSoftmaxCsr{"torchplug::softmax_csr(Tensor src, Tensor indptr, int dim=0) -> Tensor",
                                     kDtypes,
                                     "Softmax of src within each sorted group indptr[i] .. indptr[i + 1] along dim."};
inline const core::OpDef kScatterSoftmaxBackward{
    "torchplug::scatter_softmax_backward(Tensor grad, Tensor out, Tensor index, int dim, int? dim_size, "
    "bool log) -> Tensor",
    kDtypes, "The src gradient of scatter_softmax (log: scatter_log_softmax), fused."};

}  // namespace torchplug::composite_detail
