// spmm's CUDA kernels for sum.
#include "../spmm_cuda.cuh"

template void torchplug::spmm_detail::spmm_kernel_cuda<torchplug::core::SumPolicy>(
    const torchplug::spmm_detail::SpmmProblem&);
