// The composites' CUDA kernels for SoftmaxBackwardProgram.
#include "../rows_cuda.cuh"

template void torchplug::composite_detail::run_cuda<torchplug::core::SoftmaxBackwardProgram>(
    const torchplug::composite_detail::RowsProblem&, bool);
