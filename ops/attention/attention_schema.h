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

// The fused device kernels edge_attention's forward and backward call. Per
// row and head, from the inputs alone: edge_attention_softmax, the weights
// [nnz, H] (no dropout); edge_attention_score_grad, from the weights'
// gradient `grad` ([nnz, H], src's dtype) the scores' gradient in the math
// type (gat: the gradient of the value before the activation). And gatv2's
// ends: from that gradient, the gradients of src, dst and att (those
// output_mask asks for; undefined otherwise; src's needs the transpose).
// None builds E x H x C values.
inline const core::OpDef kSoftmax{
    "torchplug::edge_attention_softmax(Tensor rowptr, Tensor col, Tensor src, Tensor dst, str score, Tensor? att, "
    "float negative_slope, float scale) -> Tensor",
    kDtypes, "edge_attention's weights [nnz, H] before dropout, scores and softmax in one pass per row."};

inline const core::OpDef kScoreGrad{
    "torchplug::edge_attention_score_grad(Tensor grad, Tensor rowptr, Tensor col, Tensor src, Tensor dst, "
    "str score, Tensor? att, float negative_slope, float scale) -> Tensor",
    kDtypes, "The gradient [nnz, H] of edge_attention's scores from its weights' (edge_attention's backward)."};

inline const core::OpDef kGatv2Backward{
    "torchplug::edge_attention_gatv2_backward(Tensor grad, Tensor rowptr, Tensor col, Tensor src, Tensor dst, "
    "Tensor att, float negative_slope, Tensor? colptr, Tensor? row, Tensor? perm, bool[3] output_mask) "
    "-> (Tensor, Tensor, Tensor)",
    kDtypes, "Gradients of src, dst and att from the gatv2 scores' gradient (edge_attention's backward)."};

}  // namespace torchplug::attention_detail
