#pragma once

// The gather kernel of gather_coo, gather_csr and scatter's backward: each
// output row is one source row (or zeros for an index value outside [0, N)),
// copied in vectors of V values, one thread per vector. And each position's
// segment for gather_csr, one warp per segment.

#include "../scatter_kernel.h"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Dispatch_v2.h>
#include <ATen/ops/empty.h>

#include <limits>

namespace torchplug::scatter_detail {

// index_t: 32-bit while the items allow, where a 64-bit division per item
// would cost more than the copy.
template <typename scalar_t, int V, typename index_t>
__global__ void gather_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index,
                              scalar_t* __restrict__ out, index_t outer, int64_t N, index_t E,
                              index_t vectors, bool index_per_outer, index_t items) {
  using Vec = core::Vector<scalar_t, V>;
  for (index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < items;
       t += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t oe = t / vectors;  // o * E + e
    const index_t v = t - oe * vectors;
    const index_t o = outer == 1 ? 0 : oe / E;
    const int64_t row = __ldg(index + (index_per_outer ? oe : oe - o * E));
    Vec value;
    if (row >= 0 && row < N) {
      value = reinterpret_cast<const Vec*>(src)[(static_cast<int64_t>(o) * N + row) * vectors + v];
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
      const int64_t* index = g.index.const_data_ptr<int64_t>();
      if (items <= std::numeric_limits<int32_t>::max()) {
        core::launch(gather_kernel<scalar_t, V, uint32_t>, items, src, index, out,
                     static_cast<uint32_t>(g.outer), g.N, static_cast<uint32_t>(g.E),
                     static_cast<uint32_t>(vectors), g.index_per_outer, static_cast<uint32_t>(items));
      } else {
        core::launch(gather_kernel<scalar_t, V, int64_t>, items, src, index, out, g.outer, g.N, g.E,
                     vectors, g.index_per_outer, items);
      }
    });
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
}

// rows[k] = r for indptr[r] <= k < indptr[r + 1], and N past indptr[N]; the
// bounds clamped into [0, E]. A warp per segment: a hub's positions go out 32
// at a time, and a segment of one costs a warp's single store.
__global__ void rows_of_positions_kernel(const int64_t* __restrict__ indptr, int64_t* __restrict__ rows,
                                         int64_t N, int64_t E) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r <= N; r += warps) {
    const int64_t start = min(max(indptr[r], int64_t{0}), E);
    const int64_t end = r < N ? min(max(indptr[r + 1], int64_t{0}), E) : E;
    for (int64_t k = start + lane; k < end; k += 32) rows[k] = r;
  }
}

inline at::Tensor rows_of_positions_cuda(const at::Tensor& indptr, int64_t E) {
  const int64_t N = indptr.numel() - 1;
  at::Tensor rows = at::empty({E}, indptr.options());
  if (E > 0) {
    core::launch(rows_of_positions_kernel, 32 * (N + 1), indptr.const_data_ptr<int64_t>(),
                 rows.mutable_data_ptr<int64_t>(), N, E);
  }
  return rows;
}

}  // namespace torchplug::scatter_detail
