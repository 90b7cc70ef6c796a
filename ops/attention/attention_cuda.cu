// edge_attention on CUDA: the same forward as the CPU's (attention.cpp), whose
// fused steps (gather_coo, gather_csr, sddmm, softmax_csr) run their own CUDA
// kernels; registered only where the CUDA kernels are built.

#include "attention_kernel.h"
#include "torchplug/core/library.h"

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  m.impl(torchplug::attention_detail::kEdgeAttention, &torchplug::attention_detail::edge_attention_kernel);
}
