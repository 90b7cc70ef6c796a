// The composites' CUDA kernels for StdProgram.
#include "../rows_cuda.cuh"

template void torchplug::composite_detail::run_cuda<torchplug::core::StdProgram>(
    const torchplug::composite_detail::RowsProblem&, bool);
