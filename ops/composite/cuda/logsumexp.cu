// The composites' CUDA kernels for LogSumExpProgram.
#include "../rows_cuda.cuh"

template void torchplug::composite_detail::run_cuda<torchplug::core::LogSumExpProgram>(
    const torchplug::composite_detail::RowsProblem&, bool);
