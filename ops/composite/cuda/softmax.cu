// The composites' CUDA kernels for SoftmaxProgram.
#include "../rows_cuda.cuh"

template void torchplug::composite_detail::run_cuda<torchplug::core::SoftmaxProgram>(
    const torchplug::composite_detail::RowsProblem&, bool);
