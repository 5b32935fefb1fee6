// What the CPU kernels' x86 paths share (the small-batch linear products,
// the SBMM kernel): the attribute that compiles one function for AVX2 + FMA
// (so nothing outside it needs those instructions), the horizontal sum of a
// vector of 8 floats, in one fixed order, and a prefetch into L2.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <atomic>
#include <cstdint>

#define FLEET_AVX2 __attribute__((target("avx2,fma")))

namespace fleet::simd {

FLEET_AVX2 inline float sum_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Whether the kernels prefetch the weights they stream (on unless turned off,
// process-wide; benchmarks compare the two).
inline std::atomic<bool> prefetch_wanted{true};
inline void use_prefetch(bool on) { prefetch_wanted = on; }
inline bool prefetch_in_use() { return prefetch_wanted.load(std::memory_order_relaxed); }

// Fetches the cache line holding p into L2 (and L3) ahead of its use.
// prefetcht1 as an asm statement rather than _mm_prefetch: GCC 12 removes
// the builtin as dead code in the kernels' loops. A prefetch never faults.
inline void prefetch_l2(const void* p) { asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p))); }

// Iteration `step` of a loop prefetching `lines` cache lines from `first`,
// `per_step` of them per iteration: spread over a loop, a stream's lines
// arrive while the loop computes, where a burst of hundreds of prefetches
// would stall on the core's few outstanding misses.
inline void prefetch_l2_share(const char* first, std::int64_t lines, std::int64_t per_step, std::int64_t step) {
  const std::int64_t to = lines < (step + 1) * per_step ? lines : (step + 1) * per_step;
  for (std::int64_t l = step * per_step; l < to; ++l) prefetch_l2(first + l * 64);
}

}  // namespace fleet::simd
#endif
