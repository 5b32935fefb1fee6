// What the CPU kernels' x86 paths share (the small-batch linear products,
// the SBMM kernel): the attribute that compiles one function for AVX2 + FMA
// (so nothing outside it needs those instructions), and the horizontal sum
// of a vector of 8 floats, in one fixed order.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#define FLEET_AVX2 __attribute__((target("avx2,fma")))

namespace fleet::simd {

FLEET_AVX2 inline float sum_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace fleet::simd
#endif
