// spmm's CUDA kernels for max.
#include "../spmm_cuda.cuh"

template void torchplug::spmm_detail::spmm_kernel_cuda<torchplug::core::MaxPolicy>(
    const torchplug::spmm_detail::SpmmProblem&);
