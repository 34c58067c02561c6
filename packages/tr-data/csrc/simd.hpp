// The x86-64 SIMD kernels (AVX2) are compiled where GCC or Clang targets x86-64, each function with its own
// target attribute; cpu_avx2() (common.hpp) decides at run time whether they run.
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define TRD_HAVE_AVX2 1
#else
#define TRD_HAVE_AVX2 0
#endif
