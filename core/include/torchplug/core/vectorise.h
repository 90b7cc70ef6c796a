#pragma once

// TORCHPLUG_VECTORISED_CLONES before a CPU function compiles it for AVX-512,
// AVX2 and baseline x86-64, the variant picked when the library loads: the
// build targets baseline x86-64, and GCC vectorises min's and max's selects
// of a value and its position only from AVX2 on. Elsewhere it is empty.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define TORCHPLUG_VECTORISED_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TORCHPLUG_VECTORISED_CLONES
#endif
