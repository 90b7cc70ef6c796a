#pragma once

// example::edge_dot, the C++ API of the example plugin (installed as
// <example/example.h>; link example::example from find_package(example)).

#include <ATen/core/Tensor.h>

namespace example {

// The score of each edge of a graph, as in link prediction and attention:
//
//   out[e] = dot(x[src[e]], y[dst[e]])      x [N, F], y [M, F], src and dst int64 [E]
//
// out has shape [E] and x's dtype: float16, bfloat16, float32 or float64
// (half-precision inputs are summed in float). CPU and CUDA; differentiable in
// x and y. Goes through the dispatcher, so autograd applies from C++ too.
// Index values outside [0, N) or [0, M) raise an IndexError on the CPU and in
// checked mode on CUDA; otherwise on CUDA such an edge scores 0 and gets no
// gradient.
at::Tensor edge_dot(const at::Tensor& x, const at::Tensor& y, const at::Tensor& src, const at::Tensor& dst);

}  // namespace example
