#pragma once

// The gather kernel of gather_coo, gather_csr and scatter's backward: each
// output row is one source row (or zeros for an index value outside [0, N)),
// copied in vectors of V values, one thread per vector.

#include "../scatter_kernel.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Dispatch_v2.h>

namespace torchplug::scatter_detail {

template <typename scalar_t, int V>
__global__ void gather_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                              scalar_t* __restrict__ out, int64_t outer, int64_t N, int64_t E,
                              int64_t vectors, bool index_per_outer, int64_t items) {
  using Vec = core::Vector<scalar_t, V>;
  TORCHPLUG_GRID_STRIDE_LOOP(t, items) {
    const int64_t oe = t / vectors;  // o * E + e
    const int64_t v = t - oe * vectors;
    const int64_t o = outer == 1 ? 0 : oe / E;
    const int64_t row = index[index_per_outer ? oe : oe - o * E];
    Vec value;
    if (row >= 0 && row < N) {
      value = reinterpret_cast<const Vec*>(src)[(o * N + row) * vectors + v];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) value.val[j] = scalar_t(0);
    }
    reinterpret_cast<Vec*>(out)[t] = value;
  }
}

inline void launch_gather(const GatherProblem& g) {
  if (g.out.numel() == 0) return;
  AT_DISPATCH_V2(g.src.scalar_type(), "torchplug::gather", AT_WRAP([&] {
    const auto* src = g.src.const_data_ptr<scalar_t>();
    auto* out = g.out.mutable_data_ptr<scalar_t>();
    core::with_vector_width<scalar_t>(g.inner, {src, out}, [&](auto w) {
      constexpr int V = decltype(w)::value;
      const int64_t vectors = g.inner / V;
      const int64_t items = g.outer * g.E * vectors;
      core::launch(gather_kernel<scalar_t, V>, items, src, g.index.const_data_ptr<int64_t>(), out,
                   g.outer, g.N, g.E, vectors, g.index_per_outer, items);
    });
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
}

}  // namespace torchplug::scatter_detail
