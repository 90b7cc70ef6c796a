#pragma once

// Row programs: what the composite ops (softmax, log_softmax, logsumexp, std
// and the softmax backwards) compute over the sources of one output row, in
// math type T. Where a reduction policy (reduction.h) folds values into one,
// a program carries a State per value, which one pass over the row's sources
// builds and a second pass, for the programs that give a value per source,
// reads back. Every kernel (CPU and CUDA) is a template over a program:
//
//   State s = p.init();
//   for (source in row) p.update(s, x[source], y[source]);   // y: second input, if any
//   p.merge(s, other);              // two partial states of one row (long rows)
//   reducing programs:  out[row] = p.result(s);
//   emitting programs:  p.prepare(s);  out[source] = p.emit(s, x[source], y[source]);
//
// plus p.none(), the value of a source whose index names no row (skipped on
// CUDA outside checked mode). Programs are small values: runtime options
// (unbiased, log) travel with them to the device. States hold T; the values
// passed in and out are of any floating type V, in which the exponentials are
// taken: the CPU keeps double states over float values (one sequential pass
// over 2^20 float32 terms would drift by 1e-4) at float's cost per exp.

#include "torchplug/core/reduce/policy.h"

#include <c10/macros/Macros.h>

#include <cmath>
#include <limits>

namespace torchplug::core {

// The running maximum and the sum of exp(x - max) over the values seen.
// A NaN poisons both; -inf values add nothing (a row of them keeps max -inf).
template <typename T>
struct MaxExpSum {
  T max, sum;
};

template <typename T>
C10_HOST_DEVICE inline MaxExpSum<T> max_exp_sum_init() {
  return {-std::numeric_limits<T>::infinity(), T(0)};
}

template <typename T, typename V>
C10_HOST_DEVICE inline void max_exp_sum_update(MaxExpSum<T>& s, V x) {
  if (x > s.max) {  // rescale what was summed against the new maximum
    s.sum = s.sum * static_cast<T>(std::exp(static_cast<V>(s.max - x))) + T(1);
    s.max = x;
  } else if (is_nan(x)) {
    s.max = x;
    s.sum = x;
  } else if (x != -std::numeric_limits<V>::infinity()) {
    s.sum += static_cast<T>(std::exp(static_cast<V>(x - s.max)));
  }
}

template <typename T>
C10_HOST_DEVICE inline void max_exp_sum_merge(MaxExpSum<T>& s, const MaxExpSum<T>& o) {
  if (is_nan(s.max) || is_nan(o.max)) {
    s.max = s.sum = std::numeric_limits<T>::quiet_NaN();
    return;
  }
  if (o.max == -std::numeric_limits<T>::infinity()) return;
  if (s.max == -std::numeric_limits<T>::infinity()) {
    s = o;
    return;
  }
  const T max = s.max > o.max ? s.max : o.max;
  // The side holding the maximum keeps its sum as it is (exp(inf - inf) is NaN).
  s.sum = (s.max == max ? s.sum : s.sum * std::exp(s.max - max)) +
          (o.max == max ? o.sum : o.sum * std::exp(o.max - max));
  s.max = max;
}

// softmax (log = false) and log_softmax (log = true) of each source within its
// row, the maximum subtracted first. A row whose values are all -inf gives 0
// (log: -inf), never NaN; a NaN or a +inf in a row makes the whole row NaN,
// as in torch.softmax.
template <typename T>
struct SoftmaxProgram {
  static constexpr int kInputs = 1;
  static constexpr bool kEmits = true;
  using State = MaxExpSum<T>;
  bool log = false;

  C10_HOST_DEVICE State init() const { return max_exp_sum_init<T>(); }
  template <typename V>
  C10_HOST_DEVICE void update(State& s, V x, V) const {
    max_exp_sum_update(s, x);
  }
  C10_HOST_DEVICE void merge(State& s, const State& o) const { max_exp_sum_merge(s, o); }
  // The state becomes what emit() reads: log: (max + log(sum)); else (max, 1 / sum).
  C10_HOST_DEVICE void prepare(State& s) const {
    const bool empty = s.max == -std::numeric_limits<T>::infinity();
    if (s.max == std::numeric_limits<T>::infinity()) {  // exp(inf - inf) is NaN for every source
      s.max = s.sum = std::numeric_limits<T>::quiet_NaN();
      return;
    }
    if (log) {
      s.max = empty ? T(0) : s.max + std::log(s.sum);
    } else {
      s.sum = empty ? T(0) : T(1) / s.sum;
      s.max = empty ? T(0) : s.max;
    }
  }
  template <typename V>
  C10_HOST_DEVICE V emit(const State& s, V x, V) const {
    return log ? static_cast<V>(x - s.max) : std::exp(static_cast<V>(x - s.max)) * static_cast<V>(s.sum);
  }
  C10_HOST_DEVICE T none() const { return log ? -std::numeric_limits<T>::infinity() : T(0); }
};

// log(sum(exp(x))) of each row, stable. An empty row, or one of -inf alone,
// gives 0 (torch_scatter's value); reducing into out, out's value takes part
// as one more source, so an empty row keeps it.
template <typename T>
struct LogSumExpProgram {
  static constexpr int kInputs = 1;
  static constexpr bool kEmits = false;
  using State = MaxExpSum<T>;
  bool into_out = false;

  C10_HOST_DEVICE State init() const { return max_exp_sum_init<T>(); }
  template <typename V>
  C10_HOST_DEVICE void update(State& s, V x, V) const {
    max_exp_sum_update(s, x);
  }
  C10_HOST_DEVICE void merge(State& s, const State& o) const { max_exp_sum_merge(s, o); }
  C10_HOST_DEVICE T result(const State& s) const {
    if (s.max == -std::numeric_limits<T>::infinity()) return into_out ? s.max : T(0);
    if (s.max == std::numeric_limits<T>::infinity()) return s.max;
    return s.max + std::log(s.sum);
  }
};

// The standard deviation of each row by Welford's update (count, mean, sum
// of squared deviations), merged by Chan's formula: no cancellation of large
// sums. Divides by count - 1 (unbiased) or count, at least 1; an empty row gives 0.
template <typename T>
struct StdProgram {
  struct State {
    T count, mean, m2;
  };
  static constexpr int kInputs = 1;
  static constexpr bool kEmits = false;
  bool unbiased = true;

  C10_HOST_DEVICE State init() const { return {T(0), T(0), T(0)}; }
  template <typename V>
  C10_HOST_DEVICE void update(State& s, V value, V) const {
    const T x = value;
    s.count += T(1);
    const T delta = x - s.mean;
    s.mean += delta / s.count;
    s.m2 += delta * (x - s.mean);
  }
  C10_HOST_DEVICE void merge(State& s, const State& o) const {
    if (o.count == T(0)) return;
    if (s.count == T(0)) {
      s = o;
      return;
    }
    const T count = s.count + o.count;
    const T delta = o.mean - s.mean;
    s.mean += delta * (o.count / count);
    s.m2 += o.m2 + delta * delta * (s.count * o.count / count);
    s.count = count;
  }
  C10_HOST_DEVICE T result(const State& s) const {
    if (s.count == T(0)) return T(0);
    const T divisor = unbiased ? s.count - T(1) : s.count;
    return std::sqrt(s.m2 / (divisor < T(1) ? T(1) : divisor));
  }
};

// The src gradient of softmax (x = grad, y = the softmax): y * (grad - S),
// and of log_softmax (y = the log_softmax): grad - exp(y) * S, where S sums
// grad * y (softmax) or grad (log_softmax) over the row.
template <typename T>
struct SoftmaxBackwardProgram {
  struct State {
    T sum;
  };
  static constexpr int kInputs = 2;
  static constexpr bool kEmits = true;
  bool log = false;

  C10_HOST_DEVICE State init() const { return {T(0)}; }
  template <typename V>
  C10_HOST_DEVICE void update(State& s, V grad, V y) const {
    s.sum += log ? grad : grad * y;
  }
  C10_HOST_DEVICE void merge(State& s, const State& o) const { s.sum += o.sum; }
  C10_HOST_DEVICE void prepare(State&) const {}
  template <typename V>
  C10_HOST_DEVICE V emit(const State& s, V grad, V y) const {
    const V sum = static_cast<V>(s.sum);
    return log ? grad - std::exp(y) * sum : y * (grad - sum);
  }
  C10_HOST_DEVICE T none() const { return T(0); }
};

}  // namespace torchplug::core
