// spmm's CUDA entry points, spmm_transpose and sddmm. The spmm kernels, one
// translation unit per reduction, are in spmm_cuda.cuh.

#include "spmm_entries.h"
#include "torchplug/core/reduce/index_plan.cuh"
#include "torchplug/core/launch.cuh"
#include "torchplug/core/vector.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ceil_div.h>
#include <ATen/cuda/cub.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/sort.h>

#include <cstdint>
#include <limits>

namespace torchplug::spmm_detail {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// The row of CSR position k: the last row starting at or before k, by
// binary search over rowptr[0, M) (M >= 1).
__device__ __forceinline__ int64_t row_at(const int64_t* __restrict__ rowptr, int64_t M, int64_t k) {
  int64_t low = 0, high = M - 1;
  while (low < high) {
    const int64_t mid = (low + high + 1) / 2;
    if (rowptr[mid] <= k) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return low;
}

// Moves row forward to the row holding position k (rowptr read from L1: a
// walk over consecutive positions steps over a few rows at a time), never
// past row M - 1, so that a malformed rowptr reads nothing out of bounds.
__device__ __forceinline__ void walk_to(const int64_t* __restrict__ rowptr, int64_t M, int64_t k, int64_t& row) {
  while (row + 1 < M && rowptr[row + 1] <= k) ++row;
}

// ---------------------------------------------------------------- transpose
//
// A stable radix sort of the edges by column (cub, over only the bits a
// column needs: 20 for a million columns, where a sort of int64 keys takes
// 64), whose values carry each edge's row and position packed in one int64,
// so that no gather by the permutation follows. colptr is a binary search of
// the sorted columns. No atomics, no host synchronisation.

// Each warp takes kKeysChunk consecutive edges, finds the first one's row by
// binary search and walks rowptr from there, lane by lane (coalesced stores).
constexpr int kKeysPerLane = 8;
constexpr int64_t kKeysChunk = 32 * kKeysPerLane;

template <typename key_t>
__global__ void transpose_keys_kernel(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                                      int64_t M, int64_t N, int64_t nnz, bool packed, key_t* __restrict__ keys,
                                      int64_t* __restrict__ values) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t chunk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; chunk * kKeysChunk < nnz;
       chunk += warps) {
    const int64_t first = chunk * kKeysChunk;
    int64_t row = M > 0 ? row_at(rowptr, M, first) : 0;
#pragma unroll
    for (int i = 0; i < kKeysPerLane; ++i) {
      const int64_t k = first + i * 32 + lane;
      if (k >= nnz) break;
      walk_to(rowptr, M, k, row);
      const int64_t c = col[k];
      // A column outside [0, N) goes to bucket N, after every column.
      keys[k] = static_cast<key_t>(c >= 0 && c < N ? c : N);
      values[k] = packed ? (row << 32 | k) : k;
    }
  }
}

__global__ void transpose_unpack_kernel(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ values,
                                        int64_t M, int64_t nnz, bool packed, int64_t* __restrict__ row,
                                        int64_t* __restrict__ perm) {
  TORCHPLUG_GRID_STRIDE_LOOP(j, nnz) {
    const int64_t v = values[j];
    if (packed) {
      row[j] = v >> 32;
      perm[j] = v & 0xffffffffll;
    } else {  // past 2^31 rows: a binary search per edge
      perm[j] = v;
      row[j] = M > 0 ? row_at(rowptr, M, v) : 0;
    }
  }
}

template <typename key_t>
void sort_edges(const TransposeProblem& p, bool packed, at::Tensor& keys, at::Tensor& values) {
  const auto options = p.col.options();
  const at::Tensor keys_in = at::empty({p.nnz}, options.dtype(c10::CppTypeToScalarType<key_t>::value));
  const at::Tensor values_in = at::empty({p.nnz}, options);
  core::launch(transpose_keys_kernel<key_t>, at::ceil_div<int64_t>(p.nnz, kKeysPerLane),
               p.rowptr.const_data_ptr<int64_t>(), p.col.const_data_ptr<int64_t>(), p.M, p.N, p.nnz, packed,
               keys_in.mutable_data_ptr<key_t>(), values_in.mutable_data_ptr<int64_t>());
  if (p.nnz > std::numeric_limits<int>::max()) {  // past cub's limit: ATen's stable sort
    auto [sorted, order] = keys_in.sort(/*stable=*/true, 0, false);
    keys = sorted;
    values = values_in.index_select(0, order);
    return;
  }
  keys = at::empty_like(keys_in);
  values = at::empty_like(values_in);
  const int end_bit = 64 - __builtin_clzll(static_cast<unsigned long long>(p.N) | 1ull);
  at::cuda::cub::radix_sort_pairs(keys_in.const_data_ptr<key_t>(), keys.mutable_data_ptr<key_t>(),
                                  values_in.const_data_ptr<int64_t>(), values.mutable_data_ptr<int64_t>(), p.nnz,
                                  /*descending=*/false, /*begin_bit=*/0, end_bit);
}

}  // namespace

void transpose_kernel_cuda(const TransposeProblem& p) {
  if (p.nnz == 0) {
    p.colptr.zero_();
    return;
  }
  // Rows below 2^31 and positions below 2^32 pack into one int64 value.
  const bool packed = p.M <= std::numeric_limits<int32_t>::max() && p.nnz <= std::numeric_limits<uint32_t>::max();
  at::Tensor keys, values;
  if (p.N < std::numeric_limits<int32_t>::max()) {
    sort_edges<int32_t>(p, packed, keys, values);
  } else {
    sort_edges<int64_t>(p, packed, keys, values);
  }
  core::launch(transpose_unpack_kernel, p.nnz, p.rowptr.const_data_ptr<int64_t>(), values.const_data_ptr<int64_t>(),
               p.M, p.nnz, packed, p.row.mutable_data_ptr<int64_t>(), p.perm.mutable_data_ptr<int64_t>());
  at::Tensor colptr = p.colptr;  // a handle: the search writes into p's tensor
  at::searchsorted_out(colptr, keys, at::arange(p.N + 1, keys.options()));
}

// -------------------------------------------------------------------- sddmm
//
// out[k, h] = a[row(k), h] . b[col(k), h]: a team of T lanes (the vectors of
// a head rounded up to a power of two, at most a warp) takes one head of
// kSddmmChunk consecutive edges, finds the first one's row by binary search and walks
// rowptr from there, so that a hub is shared out like any other edges. Each
// lane multiplies its 16-byte vectors of kSddmmInFlight edges at a time (the
// a rows, the same row for most neighbouring edges, come from L1), and the
// team sums its lanes by shuffles: nothing E x F is written, and every
// product is summed in one order.
namespace {

constexpr int64_t kSddmmChunk = 64;
constexpr int kSddmmInFlight = 4;

struct SddmmSizes {
  int64_t M, N, nnz, F, H, C;  // F = H * C
  int team;                    // T
  bool mean;
};

template <typename scalar_t, int V>
__global__ void sddmm_kernel(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                             const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                             scalar_t* __restrict__ out, SddmmSizes s) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int U = kSddmmInFlight;
  const int T = s.team;
  const int lane = threadIdx.x % T;
  const int64_t vectors = s.C / V;
  const int64_t chunks = at::ceil_div<int64_t>(s.nnz, kSddmmChunk);
  // Whole warps enter and leave the loop together: the shuffles need every lane.
  const int64_t slots = at::ceil_div<int64_t>(chunks * s.H * T, 32) * 32;
  TORCHPLUG_GRID_STRIDE_LOOP(t, slots) {
    const int64_t team = t / T;
    const int64_t head = team % s.H;
    const int64_t first = team / s.H * kSddmmChunk;
    const int64_t last = min(first + kSddmmChunk, s.nnz);
    int64_t row = first < s.nnz ? row_at(rowptr, s.M, first) : 0;
    for (int64_t base = first; base < first + kSddmmChunk; base += U) {
      int64_t c[U], r[U];
      bool inside[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = base + u;
        c[u] = k < last ? col[k] : -1;
        if (k < last) walk_to(rowptr, s.M, k, row);
        r[u] = row;
        inside[u] = c[u] >= 0 && c[u] < s.N;
      }
      acc_t dot[U];
#pragma unroll
      for (int u = 0; u < U; ++u) dot[u] = 0;
      for (int64_t v = lane; v - lane < vectors; v += T) {
        acc_t x[U][V], y[U][V];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (inside[u] && v < vectors) {
            core::load_as<scalar_t, V>(a + r[u] * s.F + head * s.C + v * V, x[u]);
            core::load_as<scalar_t, V>(b + c[u] * s.F + head * s.C + v * V, y[u]);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (inside[u] && v < vectors) {
#pragma unroll
            for (int j = 0; j < V; ++j) dot[u] += x[u][j] * y[u][j];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        for (int offset = T / 2; offset > 0; offset /= 2) dot[u] += __shfl_xor_sync(kFullMask, dot[u], offset, T);
      }
      if (lane == 0) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t k = base + u;
          if (k >= last) continue;
          acc_t result = inside[u] ? dot[u] : acc_t(0);
          if (s.mean) {
            const int64_t start = min(max(rowptr[r[u]], int64_t{0}), s.nnz);
            const int64_t end = min(max(rowptr[r[u] + 1], start), s.nnz);
            result = end > start ? result / static_cast<acc_t>(end - start) : acc_t(0);
          }
          out[k * s.H + head] = static_cast<scalar_t>(result);
        }
      }
    }
  }
}

}  // namespace

void sddmm_kernel_cuda(const SddmmProblem& p) {
  if (p.nnz == 0) return;
  if (p.M == 0 || p.F == 0) {  // a malformed rowptr outside checked mode: no row to read
    p.out.zero_();
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.a.scalar_type(), "torchplug::sddmm", [&] {
    const auto* a = p.a.const_data_ptr<scalar_t>();
    const auto* b = p.b.const_data_ptr<scalar_t>();
    core::with_vector_width<scalar_t>(p.C, {a, b}, [&](auto w) {
      constexpr int V = decltype(w)::value;
      const int64_t vectors = p.C / V;
      int team = 1;
      while (team < 32 && team < vectors) team *= 2;
      const SddmmSizes s{p.M, p.N, p.nnz, p.F, p.H, p.C, team, p.mean};
      const int64_t slots =
          at::ceil_div<int64_t>(at::ceil_div<int64_t>(p.nnz, kSddmmChunk) * p.H * team, 32) * 32;
      core::launch(sddmm_kernel<scalar_t, V>, slots, p.rowptr.const_data_ptr<int64_t>(),
                   p.col.const_data_ptr<int64_t>(), a, b, p.out.mutable_data_ptr<scalar_t>(), s);
    });
  });
}

namespace {

struct CudaKernels {
  static void check(const char* op, const char* arg, const at::Tensor& t) { core::check_cuda(op, arg, t); }
  template <typename Policy>
  static void run(const SpmmProblem& p) {
    spmm_kernel_cuda<Policy>(p);
  }
  static void transpose(const TransposeProblem& p) { transpose_kernel_cuda(p); }
  static void sddmm(const SddmmProblem& p) { sddmm_kernel_cuda(p); }
};

}  // namespace
}  // namespace torchplug::spmm_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  torchplug::spmm_detail::SpmmEntries<torchplug::spmm_detail::CudaKernels>::register_all(m);
}
