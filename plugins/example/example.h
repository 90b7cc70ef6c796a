#pragma once

// example::edge_dot and example::segment_l2norm, the C++ API of the example
// plugin (installed as <example/example.h>; link example::example from
// find_package(example)).

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

// The L2 norm of each segment of src's rows (CSR order, as torch_scatter's
// segment_csr), element by element over the trailing dimensions:
//
//   out[i] = sqrt(sum over j in [indptr[i], indptr[i + 1]) of src[j]^2)
//            src [E, *], indptr int64 [N + 1], out [N, *]
//
// An empty segment gives 0. float32 and float64, CPU and CUDA; differentiable
// in src (the gradient is 0 where out is 0), twice too. indptr must start at 0,
// never decrease and end at E: an IndexError on the CPU and in checked mode on
// CUDA; otherwise on CUDA its values are clamped into [0, E]. The backward pass
// calls torchplug::gather_csr, so the library links torchplug's scatter plugin.
at::Tensor segment_l2norm(const at::Tensor& src, const at::Tensor& indptr);

}  // namespace example
