// The composites on the CPU. A program runs in two passes, both parallel and
// race-free: threads own ranges of rows and each walks every source, updating
// the states of its own rows in source order (so results do not depend on the
// thread count), then finishes them; an emitting program then writes every
// source from its row's state, parallel over sources. States are double
// whatever the dtype (core/row_program.h), values in the math type.

#include "composite_entries.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace torchplug::composite_detail {
namespace {

// Below this many source elements a pass runs on one thread.
constexpr int64_t kSerialElements = 1 << 15;
// Both passes read and write the states of random rows (a 1-D index): their
// lines are prefetched this many sources ahead, or the passes wait out a
// cache miss per source (the emit pass took 10 ns a value without).
constexpr int64_t kPrefetchSources = 16;

template <typename State>
inline void prefetch_states(const State* states, int64_t inner) {
  constexpr int64_t kPerLine = std::max<int64_t>(1, 64 / sizeof(State));
  for (int64_t f = 0; f < inner; f += kPerLine) __builtin_prefetch(states + f);
}

template <typename Program, typename scalar_t>
void run_program(const RowsProblem& r, const Program& program) {
  using State = typename Program::State;
  using acc_t = at::opmath_type<scalar_t>;
  const ScatterProblem& p = r.p;
  const int64_t outer = p.outer, E = p.E, inner = p.inner, N = p.N;
  const auto* x = p.src.const_data_ptr<scalar_t>();
  const scalar_t* y = Program::kInputs == 2 ? r.y.const_data_ptr<scalar_t>() : nullptr;
  const auto* index = p.index.const_data_ptr<int64_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  const auto second = [&](int64_t i) { return y != nullptr ? static_cast<acc_t>(y[i]) : acc_t(0); };

  std::vector<State> states(outer * N * inner);
  const int64_t elements = outer * E * inner;
  const int64_t threads = elements < kSerialElements ? 1 : at::get_num_threads();
  at::parallel_for(0, N, std::max<int64_t>(1, at::divup(N, threads)), [&](int64_t first, int64_t last) {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t slot = (o * N + first) * inner; slot < (o * N + last) * inner; ++slot) {
        states[slot] = program.init();
        if constexpr (!Program::kEmits) {
          if (p.accumulate) program.update(states[slot], static_cast<acc_t>(out[slot]), acc_t(0));
        }
      }
      for (int64_t e = 0; e < E; ++e) {
        const int64_t source = (o * E + e) * inner;
        if (p.index_1d) {
          if (e + kPrefetchSources < E) {
            const int64_t ahead = index[e + kPrefetchSources];
            if (ahead >= first && ahead < last) prefetch_states(states.data() + (o * N + ahead) * inner, inner);
          }
          const int64_t row = index[e];
          if (row < first || row >= last) continue;
          State* state = states.data() + (o * N + row) * inner;
          for (int64_t f = 0; f < inner; ++f) {
            program.update(state[f], static_cast<acc_t>(x[source + f]), second(source + f));
          }
        } else {
          for (int64_t f = 0; f < inner; ++f) {
            const int64_t row = index[source + f];
            if (row < first || row >= last) continue;
            program.update(states[(o * N + row) * inner + f], static_cast<acc_t>(x[source + f]),
                           second(source + f));
          }
        }
      }
      for (int64_t slot = (o * N + first) * inner; slot < (o * N + last) * inner; ++slot) {
        if constexpr (Program::kEmits) {
          program.prepare(states[slot]);
        } else {
          out[slot] = static_cast<scalar_t>(program.result(states[slot]));
        }
      }
    }
  });
  if constexpr (Program::kEmits) {
    const int64_t grain = std::max<int64_t>(1, kSerialElements / std::max<int64_t>(inner, 1));
    at::parallel_for(0, outer * E, grain, [&](int64_t begin, int64_t end) {
      for (int64_t oe = begin; oe < end; ++oe) {
        const int64_t o = oe / E, e = oe % E, source = oe * inner;
        const auto emit = [&](int64_t f, int64_t row) {
          out[source + f] = static_cast<scalar_t>(
              row >= 0 && row < N ? program.emit(states[(o * N + row) * inner + f],
                                                 static_cast<acc_t>(x[source + f]), second(source + f))
                                  : program.none());
        };
        if (p.index_1d) {
          if (oe + kPrefetchSources < end) {
            const int64_t next = oe + kPrefetchSources;
            const int64_t ahead = index[next % E];
            if (ahead >= 0 && ahead < N) prefetch_states(states.data() + (next / E * N + ahead) * inner, inner);
          }
          const int64_t row = index[e];
          for (int64_t f = 0; f < inner; ++f) emit(f, row);
        } else {
          for (int64_t f = 0; f < inner; ++f) emit(f, index[source + f]);
        }
      }
    });
  }
}

}  // namespace

template <template <typename> class Program>
void run_cpu(const RowsProblem& r, bool option) {
  if (r.p.out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, r.p.src.scalar_type(), "torchplug::composite", [&] {
    run_program<Program<double>, scalar_t>(r, {option});
  });
}

template void run_cpu<core::SoftmaxProgram>(const RowsProblem&, bool);
template void run_cpu<core::LogSumExpProgram>(const RowsProblem&, bool);
template void run_cpu<core::StdProgram>(const RowsProblem&, bool);
template void run_cpu<core::SoftmaxBackwardProgram>(const RowsProblem&, bool);

namespace {

struct CpuKernels {
  static void check(const char* op, const at::Tensor& src) { TORCHPLUG_CHECK_CPU(op, src); }
  template <template <typename> class Program>
  static void run(const RowsProblem& r, bool option) {
    run_cpu<Program>(r, option);
  }
};

}  // namespace
}  // namespace torchplug::composite_detail

TORCHPLUG_LIBRARY_IMPL(torchplug, CPU, m) {
  torchplug::composite_detail::CompositeEntries<torchplug::composite_detail::CpuKernels>::register_all(m);
}
