#pragma once

// The attention plugin's op: the normalised attention weights of a CSR's
// edges, per head, for one of three score functions. Its kernels (CPU, CUDA,
// Meta) and its Autograd kernel register against this OpDef, whose defaults
// are spelled as the dispatcher prints them (0.2 as a double's 17 digits).

#include "torchplug/core/registry.h"

#include <c10/core/ScalarType.h>

#include <vector>

namespace torchplug::attention_detail {

inline const std::vector<c10::ScalarType> kDtypes = {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};

inline const core::OpDef kEdgeAttention{
    "torchplug::edge_attention(Tensor rowptr, Tensor col, Tensor src, Tensor dst, str score=\"gat\", "
    "Tensor? att=None, float negative_slope=0.20000000000000001, float scale=1., float dropout=0., "
    "Generator? generator=None, "
    "Tensor? colptr=None, Tensor? row=None, Tensor? perm=None) -> Tensor",
    kDtypes,
    "Attention weights [nnz, H] of a CSR's edges: a score per edge and head, softmax over each row's edges, "
    "optional dropout."};

// gatv2's fused device kernels, which edge_attention's forward and backward
// call: the scores [nnz, H] before the softmax, and from their gradient
// `grad` ([nnz, H], in the math type) the gradients of src, dst and att
// (those output_mask asks for; undefined otherwise; src's needs the
// transpose). Neither builds the
// E x H x C activations.
inline const core::OpDef kGatv2Scores{
    "torchplug::edge_attention_gatv2_scores(Tensor rowptr, Tensor col, Tensor src, Tensor dst, Tensor att, "
    "float negative_slope) -> Tensor",
    kDtypes, "gatv2 scores [nnz, H] of a CSR's edges, before the softmax (edge_attention's forward)."};

inline const core::OpDef kGatv2Backward{
    "torchplug::edge_attention_gatv2_backward(Tensor grad, Tensor rowptr, Tensor col, Tensor src, Tensor dst, "
    "Tensor att, float negative_slope, Tensor? colptr, Tensor? row, Tensor? perm, bool[3] output_mask) "
    "-> (Tensor, Tensor, Tensor)",
    kDtypes, "Gradients of src, dst and att from the gatv2 scores' gradient (edge_attention's backward)."};

}  // namespace torchplug::attention_detail
