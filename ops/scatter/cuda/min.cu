// The reduction layer's CUDA kernels for min (scatter, segment_coo, segment_csr).
#include "torchplug/core/reduce/cuda/strategy.cuh"

TORCHPLUG_REDUCE_CUDA_INSTANTIATE(torchplug::core::MinPolicy)
