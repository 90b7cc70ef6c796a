#pragma once

// The CPU schedules of the reduction layer, parallel over the machine's
// cores: scatter_kernel_cpu<Policy> and segment_kernel_cpu<Policy>
// (problem.h), templates over a reduction policy (policy.h) that a family
// instantiates for each of its reductions. Which schedule runs is decided in
// scatter_kernel_cpu, from the named constants below.
// Race-free and deterministic: no two threads ever combine into one element,
// and every element combines its sources in source order (but for private
// outputs, whose copies are combined at the end).

#include "torchplug/core/reduce/policy.h"
#include "torchplug/core/reduce/problem.h"
#include "torchplug/core/vectorise.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ceil_div.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/searchsorted.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace torchplug::core {
namespace cpu_detail {

// Work below this many source elements runs on one thread.
constexpr int64_t kSerialElements = 1 << 15;
// Destination rows are prefetched this many source rows ahead: random
// read-modify-writes are latency bound, not bandwidth bound.
constexpr int64_t kPrefetchRows = 32;
// Per-thread private outputs are used while they take at most this many bytes.
constexpr int64_t kPrivateBytes = int64_t{256} << 20;
// Buckets are used once the output takes more than this many bytes (more than
// the last-level cache holds) and each source row at least kBucketMinRowBytes:
// narrower rows bring too little per random cache miss (measured, F=16 float32).
constexpr int64_t kBucketOutBytes = int64_t{32} << 20;
constexpr int64_t kBucketMinRowBytes = 128;
// One bucket's output rows take at most this many bytes, so they stay in L2
// (64 KB to 256 KB measured alike).
constexpr int64_t kBucketBytes = int64_t{128} << 10;
// Wide rows of at least this many bytes take balanced row ranges over column
// slices whatever the order of the index.
constexpr int64_t kBalancedRowBytes = 1024;
// Source rows are prefetched this many bucket entries ahead.
constexpr int64_t kPrefetchEntries = 16;

// Sets every element of t to the policy's identity: 0 for sums (one memset).
template <typename Policy>
void fill_identity(const at::Tensor& t) {
  if constexpr (Policy::kAtomic == core::AtomicKind::kAdd) {
    t.zero_();
  } else {
    AT_DISPATCH_ALL_TYPES(t.scalar_type(), "torchplug::fill_identity",
                          [&] { t.fill_(Policy::template identity<scalar_t>()); });
  }
}

template <int kWrite, typename T>
inline void prefetch_row(const T* row, int64_t inner) {
  constexpr int64_t kLine = 64 / sizeof(T);
  for (int64_t i = 0; i < inner; i += kLine) __builtin_prefetch(row + i, kWrite);
}

// Where a schedule combines: acc, and for min and max each element's arg (in
// acc's layout), `unset` (E) while no source holds the element's value. Args
// are int32 while E allows: the schedules move half the bytes.
template <typename acc_t, typename arg_t>
struct Target {
  acc_t* acc;
  arg_t* arg;  // nullptr unless the policy has an arg
  arg_t unset;
};

// The bytes one element of a Target takes.
template <typename Policy, typename acc_t, typename arg_t>
constexpr int64_t slot_bytes() {
  return sizeof(acc_t) + (Policy::kHasArg ? sizeof(arg_t) : 0);
}

// acc = min or max of acc and value, the value of source position e, and arg
// its position. Sources reach an element in increasing e, so its arg is the
// first that wins or, while none has, the first equal to the element's start
// value (out's, or the identity). Written as bitwise selects with whole
// stores, so that rows vectorise to blends: GCC makes the `?:` form masked
// stores (vmaskmov), which AMD CPUs run microcoded, several times slower.
template <typename T>
inline T select_bits(bool take, T a, T b) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4- or 8-byte values");
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const Bits mask = Bits{0} - static_cast<Bits>(take);
  Bits x, y;
  std::memcpy(&x, &a, sizeof(T));
  std::memcpy(&y, &b, sizeof(T));
  const Bits chosen = (x & mask) | (y & ~mask);
  T result;
  std::memcpy(&result, &chosen, sizeof(T));
  return result;
}

template <typename Policy, typename acc_t, typename arg_t>
inline void combine_with_arg(acc_t& acc, arg_t& arg, acc_t value, arg_t e, arg_t unset) {
  const acc_t before = acc;
  const arg_t arg_before = arg;
  const bool wins = Policy::wins(value, before);
  const bool first_holder = (arg_before == unset) & Policy::holds(value, before);
  acc = select_bits(wins, value, before);
  arg = select_bits(wins | first_holder, e, arg_before);
}

// acc[slot] (op)= value, the value of source position e.
template <typename Policy, typename acc_t, typename arg_t>
inline void combine(const Target<acc_t, arg_t>& t, int64_t slot, acc_t value, int64_t e) {
  if constexpr (Policy::kHasArg) {
    combine_with_arg<Policy>(t.acc[slot], t.arg[slot], value, static_cast<arg_t>(e), t.unset);
  } else {
    Policy::combine(t.acc[slot], value);
  }
}

// Combines source row e, n values from `from`, into `to` (and `arg`, for min
// and max).
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
inline void combine_values(acc_t* __restrict__ to, arg_t* __restrict__ arg,
                           const scalar_t* __restrict__ from, int64_t n, arg_t e, arg_t unset) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (Policy::kHasArg) {
      combine_with_arg<Policy>(to[i], arg[i], static_cast<acc_t>(from[i]), e, unset);
    } else {
      Policy::combine(to[i], static_cast<acc_t>(from[i]));
    }
  }
}

// combine_values compiled for AVX-512, AVX2 and baseline x86-64
// (core/vectorise.h): rows the caches hold are bound by the vector width.
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
TORCHPLUG_VECTORISED_CLONES void combine_values_vectorised(acc_t* __restrict__ to, arg_t* __restrict__ arg,
                               const scalar_t* __restrict__ from, int64_t n, arg_t e,
                               arg_t unset) {
  combine_values<Policy>(to, arg, from, n, e, unset);
}

// Combines source row e, n values from `from`, into the n elements from `slot`.
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
inline void combine_row(const Target<acc_t, arg_t>& t, int64_t slot, const scalar_t* from,
                        int64_t n, int64_t e) {
  arg_t* arg = Policy::kHasArg ? t.arg + slot : nullptr;
  // Shorter rows, and float16 and bfloat16 ones, stay inline: a call per row
  // through the chosen variant cost more than it saved at 2 and 4 values.
  if constexpr (std::is_same_v<scalar_t, acc_t>) {
    if (n >= 16) {
      combine_values_vectorised<Policy>(t.acc + slot, arg, from, n, static_cast<arg_t>(e), t.unset);
      return;
    }
  }
  combine_values<Policy>(t.acc + slot, arg, from, n, static_cast<arg_t>(e), t.unset);
}

// Which part of the work one thread does: source rows [e_begin, e_end), the
// output rows [first, last) it may write, columns [col_begin, col_end).
struct Slice {
  int64_t e_begin, e_end, first, last, col_begin, col_end;
};

// Combines the slice's source rows whose index falls in its output rows into t.
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
void add_rows(const ScatterProblem& p, const scalar_t* src, const int64_t* index,
              const Target<acc_t, arg_t>& t, const Slice& s) {
  const int64_t inner = p.inner;
  const int64_t width = s.col_end - s.col_begin;
  for (int64_t o = 0; o < p.outer; ++o) {
    const scalar_t* src_o = src + o * p.E * inner + s.col_begin;
    const int64_t slot_o = o * p.N * inner + s.col_begin;
    if (inner == 1) {  // one value a row: prefetching it would cost more than the miss
      const auto span = static_cast<uint64_t>(s.last - s.first);
      for (int64_t e = s.e_begin; e < s.e_end; ++e) {
        const int64_t row = index[e];
        if (static_cast<uint64_t>(row - s.first) < span) {
          combine<Policy>(t, slot_o + row, static_cast<acc_t>(src_o[e]), e);
        }
      }
      continue;
    }
    for (int64_t e = s.e_begin; e < s.e_end; ++e) {
      if (e + kPrefetchRows < s.e_end) {
        const int64_t ahead = index[e + kPrefetchRows];
        if (ahead >= s.first && ahead < s.last) {
          prefetch_row<1>(t.acc + slot_o + ahead * inner, width);
          if constexpr (Policy::kHasArg) prefetch_row<1>(t.arg + slot_o + ahead * inner, width);
        }
      }
      const int64_t row = index[e];
      if (row < s.first || row >= s.last) continue;
      combine_row<Policy>(t, slot_o + row * inner, src_o + e * inner, width, e);
    }
  }
}

// One source row to add: src row `e` into output row `row`.
struct Entry {
  int32_t e, row;
};

// The source rows grouped by output row range: bucket b holds the rows whose
// index lies in [b << shift, (b + 1) << shift), in source order.
struct Buckets {
  std::unique_ptr<Entry[]> entries;
  std::vector<int64_t> begin;  // bucket b is entries[begin[b], begin[b + 1])
};

// Each thread counts, then places, the entries of its own chunk of the source.
// Bucket b takes thread 0's entries first, then thread 1's, and so on, which
// keeps every bucket in source order whatever the thread count.
inline Buckets partition_rows(const ScatterProblem& p, const int64_t* index, int shift, int64_t threads) {
  const int64_t buckets = ((p.N - 1) >> shift) + 1;
  const int64_t chunk = at::ceil_div<int64_t>(p.E, threads);
  std::vector<int64_t> cursor(threads * buckets, 0);
  const auto each_chunk = [&](auto&& fn) {
    at::parallel_for(0, threads, 1, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        fn(cursor.data() + t * buckets, std::min(p.E, t * chunk), std::min(p.E, (t + 1) * chunk));
      }
    });
  };
  each_chunk([&](int64_t* count, int64_t e_begin, int64_t e_end) {
    for (int64_t e = e_begin; e < e_end; ++e) ++count[index[e] >> shift];
  });
  Buckets out;
  out.begin.resize(buckets + 1);
  int64_t total = 0;
  for (int64_t b = 0; b < buckets; ++b) {
    out.begin[b] = total;
    for (int64_t t = 0; t < threads; ++t) {
      const int64_t count = cursor[t * buckets + b];
      cursor[t * buckets + b] = total;
      total += count;
    }
  }
  out.begin[buckets] = total;
  out.entries.reset(new Entry[total]);
  Entry* entries = out.entries.get();
  each_chunk([&](int64_t* next, int64_t e_begin, int64_t e_end) {
    for (int64_t e = e_begin; e < e_end; ++e) {
      const int64_t row = index[e];
      entries[next[row >> shift]++] = Entry{static_cast<int32_t>(e), static_cast<int32_t>(row)};
    }
  });
  return out;
}

// Combines the source rows of entries [first, last) into acc. Their output
// rows stay in cache; the source rows are scattered through memory, so they
// are prefetched.
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
void add_entries(const ScatterProblem& p, const scalar_t* src, const Entry* first,
                 const Entry* last, const Target<acc_t, arg_t>& t) {
  const int64_t inner = p.inner;
  for (int64_t o = 0; o < p.outer; ++o) {
    const scalar_t* src_o = src + o * p.E * inner;
    for (const Entry* k = first; k < last; ++k) {
      if (k + kPrefetchEntries < last) {
        prefetch_row<0>(src_o + k[kPrefetchEntries].e * inner, inner);
      }
      combine_row<Policy>(t, (o * p.N + k->row) * inner, src_o + k->e * inner, inner, k->e);
    }
  }
}

// Whether the bucket schedule suits p, and the log2 of its rows per bucket.
// One thread keeps the plain loop: alone, a core gathers source rows more
// slowly than it read-modify-writes output rows that partly hit the L3;
// buckets win from two threads (docs/benchmarks.md).
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
std::optional<int> bucket_shift(const ScatterProblem& p, int64_t threads) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const int64_t row_bytes = p.outer * p.inner * slot_bytes<Policy, acc_t, arg_t>();
  if (threads == 1 || p.E > kMax || p.N > kMax || p.N * row_bytes <= kBucketOutBytes ||
      p.inner * static_cast<int64_t>(sizeof(scalar_t)) < kBucketMinRowBytes) {
    return std::nullopt;
  }
  int shift = 0;
  while ((row_bytes << (shift + 1)) <= kBucketBytes) ++shift;
  return shift;
}

// Each thread owns whole buckets: no two threads add into one output row, and
// every output row sums its source rows in source order.
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
void scatter_buckets(const ScatterProblem& p, const scalar_t* src, const int64_t* index,
                     const Target<acc_t, arg_t>& t, int shift, int64_t threads) {
  const Buckets buckets = partition_rows(p, index, shift, threads);
  const Entry* entries = buckets.entries.get();
  const int64_t count = static_cast<int64_t>(buckets.begin.size()) - 1;
  at::parallel_for(0, count, 1, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      add_entries<Policy>(p, src, entries + buckets.begin[b], entries + buckets.begin[b + 1], t);
    }
  });
}

// threads + 1 bounds of output row ranges, each cut at the row boundary
// nearest to k * E / threads sources, or nothing when the fullest range would
// get more than 5/4 of E / threads: a row with more than a thread's share, or
// fewer source rows than threads (then column slices keep every thread busy).
// Index values are already in [0, N).
inline std::optional<std::vector<int64_t>> balanced_rows(const ScatterProblem& p, const int64_t* index,
                                                  int64_t threads) {
  std::vector<int64_t> counts(p.N, 0);
  for (int64_t e = 0; e < p.E; ++e) ++counts[index[e]];
  std::vector<int64_t> bounds{0};
  int64_t taken = 0, range = 0, fullest = 0;
  for (int64_t row = 0; row < p.N; ++row) {
    const auto cut = static_cast<int64_t>(bounds.size());
    const int64_t target = cut * p.E / threads;
    if (cut < threads && taken + counts[row] >= target) {
      // The target lies within this row's sources: cut on its nearer side.
      const bool before = target - taken < taken + counts[row] - target;
      const int64_t first = before ? counts[row] : 0;
      fullest = std::max(fullest, range + counts[row] - first);
      range = first;
      bounds.push_back(before ? row : row + 1);
    } else {
      range += counts[row];
    }
    taken += counts[row];
  }
  fullest = std::max(fullest, range);
  if (4 * fullest * threads > 5 * p.E) return std::nullopt;
  bounds.resize(threads + 1, p.N);
  return bounds;
}

// index is one vector along dim. Four race-free schedules:
//  - buckets, for wide rows, an output no cache holds and several threads: the
//    source rows are first grouped (stably) by bucket of 2^shift output rows,
//    then each thread sums whole buckets, whose output rows stay in L2 while
//    the source rows are prefetched. A source row is a random read instead of
//    an output row being a random read-modify-write, and no output line leaves
//    the cache until its bucket is done. Every output row adds its source rows
//    in source order, as the one-thread loop does: the same bits either way.
//  - private outputs: each thread sums a slice of the source rows into its own
//    copy of the output (thread 0 into acc), then the copies are added up. Used
//    while the copies are small and output rows have four sources or more on
//    average, wide rows included: there column slices (two threads reading
//    alternate lines of every source row) ran several times slower. Results
//    depend on the thread count (the copies' sums).
//  - row ownership: each thread owns a range of output rows and walks the whole
//    index, adding only the rows it owns. For wide rows the ranges are cut so
//    that each receives about E / threads source rows (balanced_rows), and
//    taken when the index is sorted or accumulator rows are 1 KB or more:
//    there two threads reading alternate halves of each row ran slower.
//  - column slices, for other wide rows and for those no cut of the output
//    rows balances (balanced_rows): each thread adds its own
//    64-byte-aligned slice of every row's columns. Every source byte is read
//    once, in order, the output is not copied, and no two threads share a
//    cache line.
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
void scatter_rows(const ScatterProblem& p, const scalar_t* src, const int64_t* index,
                  const Target<acc_t, arg_t>& acc) {
  const int64_t threads = at::get_num_threads();
  const int64_t out_numel = p.outer * p.N * p.inner;
  if (const auto shift = bucket_shift<Policy, scalar_t, acc_t, arg_t>(p, threads)) {
    scatter_buckets<Policy>(p, src, index, acc, *shift, threads);
    return;
  }
  if (threads == 1 || p.outer * p.E * p.inner < kSerialElements) {
    add_rows<Policy>(p, src, index, acc, Slice{0, p.E, 0, p.N, 0, p.inner});
    return;
  }
  const int64_t private_bytes = (threads - 1) * out_numel * slot_bytes<Policy, acc_t, arg_t>();
  if (private_bytes <= kPrivateBytes && p.N * 4 <= p.E) {
    const at::Tensor copies =
        at::full({threads - 1, out_numel}, partial_identity<Policy, acc_t>(),
                 p.src.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    // A copy's args are positions of its own chunk of the source, all larger
    // than those of the copies before it.
    const at::Tensor copy_args =
        Policy::kHasArg ? at::full({threads - 1, out_numel}, p.E,
                                   p.src.options().dtype(c10::CppTypeToScalarType<arg_t>::value))
                        : at::Tensor();
    const auto copy = [&](int64_t t) {
      arg_t* args = Policy::kHasArg ? copy_args.mutable_data_ptr<arg_t>() + t * out_numel : nullptr;
      acc_t* values = copies.mutable_data_ptr<acc_t>() + t * out_numel;
      return Target<acc_t, arg_t>{values, args, acc.unset};
    };
    const int64_t chunk = at::ceil_div<int64_t>(p.E, threads);
    at::parallel_for(0, threads, 1, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        const Slice slice{std::min(p.E, t * chunk), std::min(p.E, (t + 1) * chunk), 0, p.N, 0,
                          p.inner};
        add_rows<Policy>(p, src, index, t == 0 ? acc : copy(t - 1), slice);
      }
    });
    at::parallel_for(0, out_numel, 1 << 12, [&](int64_t begin, int64_t end) {
      for (int64_t t = 0; t < threads - 1; ++t) {
        const Target<acc_t, arg_t> from = copy(t);
        for (int64_t j = begin; j < end; ++j) {
          combine<Policy>(acc, j, from.acc[j], Policy::kHasArg ? from.arg[j] : p.E);
        }
      }
    });
    return;
  }
  // A line of the narrower of the two arrays (min and max: int32 args of
  // 8-byte values), so that threads share no cache line of either.
  constexpr int64_t kLine = 64 / std::min(sizeof(acc_t), Policy::kHasArg ? sizeof(arg_t) : sizeof(acc_t));
  const int64_t lines = p.inner / kLine;
  if (lines >= threads) {
    // Row ranges let each thread stream its own source rows when the index is
    // sorted; with an unsorted one they won only for rows of 1 KB or more
    // (column slices read every source row in order).
    const bool rows_win = p.inner * static_cast<int64_t>(sizeof(acc_t)) >= kBalancedRowBytes ||
                          std::is_sorted(index, index + p.E);
    const auto bounds = rows_win ? balanced_rows(p, index, threads) : std::nullopt;
    if (bounds) {
      at::parallel_for(0, threads, 1, [&](int64_t t_begin, int64_t t_end) {
        for (int64_t t = t_begin; t < t_end; ++t) {
          add_rows<Policy>(p, src, index, acc,
                           Slice{0, p.E, (*bounds)[t], (*bounds)[t + 1], 0, p.inner});
        }
      });
      return;
    }
    at::parallel_for(0, lines, 1, [&](int64_t line_begin, int64_t line_end) {
      const int64_t col_end = line_end == lines ? p.inner : line_end * kLine;
      add_rows<Policy>(p, src, index, acc, Slice{0, p.E, 0, p.N, line_begin * kLine, col_end});
    });
    return;
  }
  at::parallel_for(0, p.N, 1, [&](int64_t first, int64_t last) {
    add_rows<Policy>(p, src, index, acc, Slice{0, p.E, first, last, 0, p.inner});
  });
}

// index has src's shape. Each thread owns a range of (outer, inner) columns;
// a column's elements all land in that column of the output.
template <typename Policy, typename scalar_t, typename acc_t, typename arg_t>
void scatter_columns(const ScatterProblem& p, const scalar_t* src, const int64_t* index,
                     const Target<acc_t, arg_t>& acc) {
  const int64_t columns = p.outer * p.inner;
  const int64_t grain = p.outer * p.E * p.inner < kSerialElements ? columns : 1;
  at::parallel_for(0, columns, grain, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      const int64_t o = c / p.inner;
      const int64_t i = c % p.inner;
      const int64_t base = o * p.E * p.inner + i;
      const int64_t slot_col = o * p.N * p.inner + i;
      for (int64_t e = 0; e < p.E; ++e) {
        const int64_t pos = base + e * p.inner;
        combine<Policy>(acc, slot_col + index[pos] * p.inner, static_cast<acc_t>(src[pos]), e);
      }
    }
  });
}

// A buffer in src's math type to reduce into, holding the policy's identity
// unless accumulating and otherwise out's values: problem.out itself, or for
// float16 and bfloat16 a float buffer of its shape.
template <typename Policy>
at::Tensor accumulator(const ScatterProblem& problem) {
  const auto dtype = at::toOpMathType(problem.src.scalar_type());
  if (dtype == problem.out.scalar_type()) {
    if (!problem.accumulate) fill_identity<Policy>(problem.out);
    return problem.out;
  }
  if (problem.accumulate) return problem.out.to(dtype);
  auto acc = at::empty_like(problem.out, problem.out.options().dtype(dtype));
  fill_identity<Policy>(acc);
  return acc;
}

// What the policy does once every source is combined: min and max give empty
// slots their value and their args to p.arg, mean divides by the count.
// `any`: some source lands somewhere (src and out are not empty).
template <typename Policy, typename acc_t, typename arg_t>
void finalize(const ScatterProblem& p, const Target<acc_t, arg_t>& t, bool any) {
  const int64_t slots = p.out.numel();
  if constexpr (Policy::kHasArg) {
    int64_t* arg = p.arg.mutable_data_ptr<int64_t>();
    at::parallel_for(0, slots, 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t slot = begin; slot < end; ++slot) {
        if (t.arg[slot] == t.unset && !p.accumulate) t.acc[slot] = Policy::template empty<acc_t>();
        if constexpr (!std::is_same_v<arg_t, int64_t>) arg[slot] = t.arg[slot];
      }
    });
  } else if constexpr (Policy::kDividesByCount) {
    // Counts per output row for a 1-D index, per output element otherwise;
    // each thread counts the sources of its own (outer, inner) columns.
    const int64_t* index = p.index.const_data_ptr<int64_t>();
    std::vector<int64_t> counts(p.index_1d ? p.N : slots, 0);
    if (any && p.index_1d) {
      for (int64_t e = 0; e < p.E; ++e) ++counts[index[e]];
    } else if (any) {
      const int64_t columns = p.outer * p.inner;
      const bool serial = p.src.numel() < kSerialElements;
      at::parallel_for(0, columns, serial ? columns : 1, [&](int64_t first, int64_t last) {
        for (int64_t c = first; c < last; ++c) {
          const int64_t o = c / p.inner;
          const int64_t f = c % p.inner;
          for (int64_t e = 0; e < p.E; ++e) {
            ++counts[(o * p.N + index[(o * p.E + e) * p.inner + f]) * p.inner + f];
          }
        }
      });
    }
    at::parallel_for(0, slots, 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t slot = begin; slot < end; ++slot) {
        const int64_t count = p.index_1d ? counts[slot / p.inner % p.N] : counts[slot];
        t.acc[slot] = Policy::finalize(t.acc[slot], count);
      }
    });
  }
}

}  // namespace cpu_detail

template <typename Policy>
void scatter_kernel_cpu(const ScatterProblem& p) {
  using namespace cpu_detail;
  // A sorted index (a batch vector, a CSR's rows) names segments: each output
  // row is combined once, in order, with no private copies. A random index
  // leaves std::is_sorted at its first descent.
  const int64_t* index = p.index.const_data_ptr<int64_t>();
  if (p.index_1d && !p.accumulate && p.src.numel() > 0 && std::is_sorted(index, index + p.E)) {
    segment_kernel_cpu<Policy>(p, at::searchsorted(p.index, at::arange(p.N + 1, p.index.options())));
    return;
  }
  const at::Tensor acc_tensor = accumulator<Policy>(p);
  const bool any = p.src.numel() > 0 && p.out.numel() > 0;
  const auto run = [&](auto arg_type) {
    using arg_t = decltype(arg_type);
    at::Tensor arg_tensor;
    if constexpr (Policy::kHasArg) {
      arg_tensor = std::is_same_v<arg_t, int64_t>
          ? p.arg
          : at::empty_like(p.arg, p.arg.options().dtype(c10::CppTypeToScalarType<arg_t>::value));
      arg_tensor.fill_(p.E);
    }
    AT_DISPATCH_V2(p.src.scalar_type(), "torchplug::reduce", AT_WRAP([&] {
      using acc_t = at::opmath_type<scalar_t>;
      const auto* src = p.src.const_data_ptr<scalar_t>();
      arg_t* args = Policy::kHasArg ? arg_tensor.mutable_data_ptr<arg_t>() : nullptr;
      const Target<acc_t, arg_t> acc{acc_tensor.mutable_data_ptr<acc_t>(), args,
                                     static_cast<arg_t>(p.E)};
      if (any && p.index_1d) {
        scatter_rows<Policy, scalar_t>(p, src, index, acc);
      } else if (any) {
        scatter_columns<Policy, scalar_t>(p, src, index, acc);
      }
      finalize<Policy>(p, acc, any);
    }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
  };
  if (!Policy::kHasArg || p.E < std::numeric_limits<int32_t>::max()) {
    run(int32_t{});
  } else if constexpr (Policy::kHasArg) {
    run(int64_t{});
  }
  if (!acc_tensor.is_same(p.out)) p.out.copy_(acc_tensor);
}

namespace cpu_detail {

// The segments [first, last) of a caller's indptr ([N + 1], bounds clamped
// into [0, E]), each combined in order into a row of accumulators and written
// once, with its arg for min and max.
template <typename Policy, typename scalar_t, typename arg_t>
void combine_segments(const ScatterProblem& p, const int64_t* bounds, int64_t first, int64_t last) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t inner = p.inner;
  const auto* src = p.src.const_data_ptr<scalar_t>();
  auto* out = p.out.mutable_data_ptr<scalar_t>();
  int64_t* arg_out = Policy::kHasArg ? p.arg.mutable_data_ptr<int64_t>() : nullptr;
  const auto bound = [&](int64_t r) { return std::min(std::max(bounds[r], int64_t{0}), p.E); };
  std::vector<acc_t> acc(inner);
  std::vector<arg_t> arg(Policy::kHasArg ? inner : 0);
  const auto unset = static_cast<arg_t>(p.E);
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t start = bound(r), end = std::max(bound(r + 1), start);
      std::fill(acc.begin(), acc.end(), Policy::template identity<acc_t>());
      if constexpr (Policy::kHasArg) std::fill(arg.begin(), arg.end(), unset);
      for (int64_t k = start; k < end; ++k) {
        const scalar_t* row = src + (o * p.E + k) * inner;
        if constexpr (std::is_same_v<scalar_t, acc_t>) {
          combine_values_vectorised<Policy>(acc.data(), arg.data(), row, inner, static_cast<arg_t>(k), unset);
        } else {
          combine_values<Policy>(acc.data(), arg.data(), row, inner, static_cast<arg_t>(k), unset);
        }
      }
      const int64_t slot = (o * p.N + r) * inner;
      for (int64_t f = 0; f < inner; ++f) {
        out[slot + f] = static_cast<scalar_t>(core::finish<Policy>(acc[f], end - start, false));
        if constexpr (Policy::kHasArg) arg_out[slot + f] = arg[f];
      }
    }
  }
}

}  // namespace cpu_detail

// Each thread takes the segments starting in its share of the positions (cut
// at the segment nearest t * E / threads, so a long segment stays whole and a
// skewed split stays balanced): no index is read and no output element is
// written twice. An indptr is checked on the CPU before this runs.
template <typename Policy>
void segment_kernel_cpu(const ScatterProblem& p, const at::Tensor& indptr) {
  using namespace cpu_detail;
  if (p.out.numel() == 0) return;
  const int64_t* bounds = indptr.const_data_ptr<int64_t>();
  const int64_t threads = p.src.numel() < kSerialElements ? 1 : at::get_num_threads();
  std::vector<int64_t> cuts(threads + 1, p.N);
  cuts[0] = 0;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t position = t * p.E / threads;
    const int64_t r = std::upper_bound(bounds, bounds + p.N + 1, position) - bounds - 1;
    cuts[t] = std::clamp<int64_t>(r, cuts[t - 1], p.N);
  }
  AT_DISPATCH_V2(p.src.scalar_type(), "torchplug::reduce", AT_WRAP([&] {
    at::parallel_for(0, threads, 1, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        if (!Policy::kHasArg || p.E < std::numeric_limits<int32_t>::max()) {
          combine_segments<Policy, scalar_t, int32_t>(p, bounds, cuts[t], cuts[t + 1]);
        } else {
          combine_segments<Policy, scalar_t, int64_t>(p, bounds, cuts[t], cuts[t + 1]);
        }
      }
    });
  }), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16, at::kInt, at::kLong);
}

}  // namespace torchplug::core

// The explicit instantiations of both entries for one policy, for a family's
// CPU translation unit.
#define TORCHPLUG_REDUCE_CPU_INSTANTIATE(Policy)                                    \
  template void torchplug::core::scatter_kernel_cpu<Policy>(                        \
      const torchplug::core::ScatterProblem&);                                      \
  template void torchplug::core::segment_kernel_cpu<Policy>(                        \
      const torchplug::core::ScatterProblem&, const at::Tensor&);
