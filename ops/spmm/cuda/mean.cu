// spmm's CUDA kernels for mean.
#include "../spmm_cuda.cuh"

template void torchplug::spmm_detail::spmm_kernel_cuda<torchplug::core::MeanPolicy>(
    const torchplug::spmm_detail::SpmmProblem&);
