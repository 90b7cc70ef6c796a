// spmm's CUDA kernels for min.
#include "../spmm_cuda.cuh"

template void torchplug::spmm_detail::spmm_kernel_cuda<torchplug::core::MinPolicy>(
    const torchplug::spmm_detail::SpmmProblem&);
