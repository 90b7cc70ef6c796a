// The attention plugin on CUDA: the fused kernels, and the registration of
// every entry point (attention_entries.h). A team of lanes per row for the
// softmax, a warp per row (per column of the transpose for gatv2's src
// gradient) for gatv2's backward; sums are in a fixed order (a lane's
// edges, then a butterfly), so results are deterministic. Scores and
// gatv2's activations are recomputed where needed, never stored.

#include "attention_entries.h"
#include "attention_softmax.h"
#include "torchplug/core/launch.cuh"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include <type_traits>

namespace torchplug::attention_detail {
namespace {

constexpr int kWarp = 32;

struct WarpOf {
  int64_t warp, warps;
  int lane;
};

__device__ __forceinline__ WarpOf warp_of() {
  const int64_t thread = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  return {thread / kWarp, int64_t{gridDim.x} * blockDim.x / kWarp, static_cast<int>(threadIdx.x % kWarp)};
}

template <typename acc_t>
__device__ __forceinline__ acc_t act(acc_t z, acc_t slope) {
  return z > 0 ? z : z * slope;
}

// A team of lanes per row: a lane per head (a power of two of them, up to
// 32, heads past H idle) times `slots` edges side by side, so that one step
// of the team reads the scores of `slots` edges and consecutive heads at
// once. Teams are aligned runs of a warp's lanes; short rows share a warp.
// The team's shape follows the problem's only, so results repeat.
struct Team {
  int lane_bits;  // log2 of the lanes per team
  int head_bits;  // log2 of the lanes per edge
};

struct TeamLane {
  int64_t team, teams;
  int heads, slots;  // lanes per edge, edges per step
  int head, slot;    // this lane's
  int first;         // the team's first lane in the warp
  unsigned mask;     // the team's lanes
};

__device__ __forceinline__ TeamLane team_lane(Team t) {
  const int64_t thread = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int size = 1 << t.lane_bits, heads = 1 << t.head_bits;
  const int warp_lane = static_cast<int>(threadIdx.x % kWarp);
  const int lane = warp_lane & (size - 1);
  return {thread >> t.lane_bits,
          (int64_t{gridDim.x} * blockDim.x) >> t.lane_bits,
          heads,
          size >> t.head_bits,
          lane & (heads - 1),
          lane >> t.head_bits,
          warp_lane - lane,
          size == kWarp ? 0xffffffffu : ((1u << size) - 1) << (warp_lane - lane)};
}

// A head's state over the team's slots, merged by a butterfly and then slot
// 0's taken by all: every lane of the head writes with the same normaliser.
template <typename T>
__device__ __forceinline__ core::MaxExpSum<T> team_merged(core::MaxExpSum<T> s, const TeamLane& l) {
  for (int offset = l.slots * l.heads / 2; offset >= l.heads; offset /= 2) {
    const core::MaxExpSum<T> other{__shfl_xor_sync(l.mask, s.max, offset), __shfl_xor_sync(l.mask, s.sum, offset)};
    core::max_exp_sum_merge(s, other);
  }
  return {__shfl_sync(l.mask, s.max, l.first + l.head), __shfl_sync(l.mask, s.sum, l.first + l.head)};
}

template <typename T>
__device__ __forceinline__ T team_sum(T v, const TeamLane& l) {
  for (int offset = l.slots * l.heads / 2; offset >= l.heads; offset /= 2) v += __shfl_xor_sync(l.mask, v, offset);
  return __shfl_sync(l.mask, v, l.first + l.head);
}

// A team per row, a lane per head: the scores' softmax (weights), or with
// kGrad the scores' gradient from the weights' (attention_softmax.h;
// attention_cpu.cpp's softmax_rows is the same program).
template <typename scalar_t, bool kGrad>
__global__ void softmax_rows_kernel(int64_t M, const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                                    EdgeScore<scalar_t> score, const scalar_t* __restrict__ grad,
                                    std::conditional_t<kGrad, at::opmath_type<scalar_t>, scalar_t>* __restrict__ out,
                                    Team team) {
  using T = at::opmath_type<scalar_t>;
  using out_t = std::conditional_t<kGrad, T, scalar_t>;
  const int64_t H = score.H;
  const TeamLane l = team_lane(team);
  for (int64_t r = l.team; r < M; r += l.teams) {
    const int64_t begin = rowptr[r] + l.slot, end = rowptr[r + 1];
    for (int64_t h = l.head; h - l.head < H; h += l.heads) {
      const bool head = h < H;
      core::MaxExpSum<T> state = core::max_exp_sum_init<T>();
      if (head) {
        for (int64_t k = begin; k < end; k += l.slots) core::max_exp_sum_update(state, score(col[k], r, h));
      }
      const core::MaxExpSum<T> n = normaliser(team_merged(state, l));
      if constexpr (!kGrad) {
        if (!head) continue;
        for (int64_t k = begin; k < end; k += l.slots) {
          out[k * H + h] = static_cast<out_t>(weight(n, score(col[k], r, h)));
        }
      } else {
        T partial = 0;
        if (head) {
          for (int64_t k = begin; k < end; k += l.slots) {
            partial += weight(n, score(col[k], r, h)) * static_cast<T>(grad[k * H + h]);
          }
        }
        const T sum = team_sum(partial, l);
        if (!head) continue;
        for (int64_t k = begin; k < end; k += l.slots) {
          T pre = 0;
          const T alpha = weight(n, score(col[k], r, h, &pre));
          T gs = alpha * (static_cast<T>(grad[k * H + h]) - sum);
          if (score.kind == Score::kGat && !(pre > T(0))) gs *= score.slope;
          out[k * H + h] = gs;
        }
      }
    }
  }
}

// The team for a problem: a lane per head (H rounded up to a power of two,
// at most a warp), and about as many slots as a row has edges on average.
Team team_for(const EdgeProblem& p) {
  int head_bits = 0;
  while (head_bits < 5 && (int64_t{1} << head_bits) < p.H) ++head_bits;
  const int64_t edges = p.M == 0 ? 0 : p.col.numel() / p.M;
  int lane_bits = head_bits;
  while (lane_bits < 5 && (int64_t{1} << (lane_bits - head_bits)) < edges) ++lane_bits;
  return {lane_bits, head_bits};
}

// dst's gradient and att's partial sums: a warp per block of
// kGatv2RowsPerPartial rows, lanes over the features.
template <typename scalar_t>
__global__ void gatv2_rows_backward_kernel(int64_t M, const int64_t* __restrict__ rowptr,
                                           const int64_t* __restrict__ col, const scalar_t* __restrict__ src,
                                           const scalar_t* __restrict__ dst, const scalar_t* __restrict__ att,
                                           const at::opmath_type<scalar_t>* __restrict__ grad, double negative_slope,
                                           int64_t H, int64_t C, scalar_t* __restrict__ grad_dst,
                                           at::opmath_type<scalar_t>* __restrict__ partials) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t slope = static_cast<acc_t>(negative_slope);
  const int64_t F = H * C, blocks = (M + kGatv2RowsPerPartial - 1) / kGatv2RowsPerPartial;
  const WarpOf w = warp_of();
  for (int64_t b = w.warp; b < blocks; b += w.warps) {
    const int64_t last = min(M, (b + 1) * kGatv2RowsPerPartial);
    for (int64_t f = w.lane; f < F; f += kWarp) {
      const acc_t a = static_cast<acc_t>(att[f]);
      const int64_t h = f / C;
      acc_t att_sum = 0;
      for (int64_t r = b * kGatv2RowsPerPartial; r < last; ++r) {
        const acc_t d = static_cast<acc_t>(dst[r * F + f]);
        acc_t sum = 0;
        for (int64_t k = rowptr[r]; k < rowptr[r + 1]; ++k) {
          const acc_t z = static_cast<acc_t>(src[col[k] * F + f]) + d;
          const acc_t g = grad[k * H + h];
          sum += g * a * (z > 0 ? acc_t(1) : slope);
          att_sum += g * act(z, slope);
        }
        if (grad_dst != nullptr) grad_dst[r * F + f] = static_cast<scalar_t>(sum);
      }
      if (partials != nullptr) partials[b * F + f] = att_sum;
    }
  }
}

// src's gradient: a warp per column of the transpose, lanes over the features.
template <typename scalar_t>
__global__ void gatv2_columns_backward_kernel(int64_t N, const int64_t* __restrict__ colptr,
                                              const int64_t* __restrict__ row, const int64_t* __restrict__ perm,
                                              const scalar_t* __restrict__ src, const scalar_t* __restrict__ dst,
                                              const scalar_t* __restrict__ att,
                                              const at::opmath_type<scalar_t>* __restrict__ grad,
                                              double negative_slope, int64_t H, int64_t C,
                                              scalar_t* __restrict__ grad_src) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t slope = static_cast<acc_t>(negative_slope);
  const int64_t F = H * C;
  const WarpOf w = warp_of();
  for (int64_t c = w.warp; c < N; c += w.warps) {
    for (int64_t f = w.lane; f < F; f += kWarp) {
      const acc_t a = static_cast<acc_t>(att[f]), s = static_cast<acc_t>(src[c * F + f]);
      const int64_t h = f / C;
      acc_t sum = 0;
      for (int64_t j = colptr[c]; j < colptr[c + 1]; ++j) {
        const acc_t z = s + static_cast<acc_t>(dst[row[j] * F + f]);
        sum += grad[perm[j] * H + h] * a * (z > 0 ? acc_t(1) : slope);
      }
      grad_src[c * F + f] = static_cast<scalar_t>(sum);
    }
  }
}

template <typename T>
T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.mutable_data_ptr<T>() : nullptr;
}

struct CudaKernels {
  static void check(const char* op, const char* arg, const at::Tensor& t) { core::check_cuda(op, arg, t); }

  template <bool kGrad>
  static void rows(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::edge_attention_softmax",
                                    [&] {
                                      using out_t = std::conditional_t<kGrad, at::opmath_type<scalar_t>, scalar_t>;
                                      const Team team = team_for(p);
                                      core::launch(softmax_rows_kernel<scalar_t, kGrad>, p.M << team.lane_bits, p.M,
                                                   p.rowptr.const_data_ptr<int64_t>(),
                                                   p.col.const_data_ptr<int64_t>(), edge_score<scalar_t>(p),
                                                   kGrad ? grad.const_data_ptr<scalar_t>() : nullptr,
                                                   out.mutable_data_ptr<out_t>(), team);
                                    });
  }

  static void softmax(const EdgeProblem& p, const at::Tensor& out) { rows<false>(p, at::Tensor(), out); }

  static void score_grad(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& out) {
    rows<true>(p, grad, out);
  }

  static void gatv2_backward(const EdgeProblem& p, const at::Tensor& grad, const at::Tensor& colptr,
                             const at::Tensor& row, const at::Tensor& perm, const at::Tensor& grad_src,
                             const at::Tensor& grad_dst, const at::Tensor& partials) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, p.src.scalar_type(), "torchplug::edge_attention_gatv2_backward", [&] {
          using acc_t = at::opmath_type<scalar_t>;
          if (grad_dst.defined() || partials.defined()) {
            const int64_t blocks = (p.M + kGatv2RowsPerPartial - 1) / kGatv2RowsPerPartial;
            core::launch(gatv2_rows_backward_kernel<scalar_t>, blocks * kWarp, p.M,
                         p.rowptr.const_data_ptr<int64_t>(), p.col.const_data_ptr<int64_t>(),
                         p.src.const_data_ptr<scalar_t>(), p.dst.const_data_ptr<scalar_t>(),
                         p.att.const_data_ptr<scalar_t>(), grad.const_data_ptr<acc_t>(), p.negative_slope, p.H, p.C,
                         data_or_null<scalar_t>(grad_dst), data_or_null<acc_t>(partials));
          }
          if (grad_src.defined()) {
            core::launch(gatv2_columns_backward_kernel<scalar_t>, p.N * kWarp, p.N,
                         colptr.const_data_ptr<int64_t>(), row.const_data_ptr<int64_t>(),
                         perm.const_data_ptr<int64_t>(), p.src.const_data_ptr<scalar_t>(),
                         p.dst.const_data_ptr<scalar_t>(), p.att.const_data_ptr<scalar_t>(),
                         grad.const_data_ptr<acc_t>(), p.negative_slope, p.H, p.C,
                         grad_src.mutable_data_ptr<scalar_t>());
          }
        });
  }
};

}  // namespace
}  // namespace torchplug::attention_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CUDA, m) {
  torchplug::attention_detail::AttentionEntries<torchplug::attention_detail::CudaKernels>::register_all(m);
}
