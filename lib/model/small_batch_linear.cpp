#include "model/small_batch_linear.h"

#include <algorithm>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace fleet::model::small_batch {

#if defined(__x86_64__)

// Every function that touches 256-bit vectors carries the target itself, so
// nothing outside them needs AVX2.
#define FLEET_AVX2 __attribute__((target("avx2,fma")))

namespace {

FLEET_AVX2 inline float sum_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// J weight rows (outputs o .. o + J) times R rows of x: J·R running sums of
// eight lanes each over the multiples of eight in k, then the tail in scalar
// order. With J = 3 and R = 4 that is 12 accumulators, 3 + 4 loads and 12
// FMAs per eight k: the FMA units, not the loads, set the pace.
struct Strides {
  std::int64_t in, x, y;
  bool accumulate;
};

template <int J, int R>
FLEET_AVX2 void block(const float* x, const float* w, float* y, const Strides& s) {
  const std::int64_t in = s.in;
  __m256 acc[J][R];
#pragma GCC unroll 4
  for (int j = 0; j < J; ++j)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[j][r] = _mm256_setzero_ps();
  const std::int64_t body = in / 8 * 8;
  for (std::int64_t k = 0; k < body; k += 8) {
    __m256 wv[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) wv[j] = _mm256_loadu_ps(w + j * in + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * s.x + k);
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) acc[j][r] = _mm256_fmadd_ps(wv[j], xv, acc[j][r]);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < J; ++j)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float sum = sum_lanes(acc[j][r]);
      for (std::int64_t k = body; k < in; ++k) sum += x[r * s.x + k] * w[j * in + k];
      float& out = y[r * s.y + j];
      out = s.accumulate ? out + sum : sum;
    }
}

template <int J>
FLEET_AVX2 void rows_times(const float* x, std::int64_t rows, const float* w, float* y, const Strides& s) {
  for (std::int64_t r0 = 0; r0 < rows; r0 += 4) {
    const float* xr = x + r0 * s.x;
    float* yr = y + r0 * s.y;
    switch (std::min<std::int64_t>(4, rows - r0)) {
      case 1: block<J, 1>(xr, w, yr, s); break;
      case 2: block<J, 2>(xr, w, yr, s); break;
      case 3: block<J, 3>(xr, w, yr, s); break;
      default: block<J, 4>(xr, w, yr, s); break;
    }
  }
}

}  // namespace

bool available() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

FLEET_AVX2 void linear(const float* x, std::int64_t rows, std::int64_t in, std::int64_t x_stride, const float* w,
                       std::int64_t count, float* y, std::int64_t y_stride, bool accumulate) {
  const Strides s{in, x_stride, y_stride, accumulate};
  // Outer loop over weight rows: each block of three is read from memory once
  // and reused from L1 for every group of four rows of x.
  std::int64_t j = 0;
  for (; j + 3 <= count; j += 3) rows_times<3>(x, rows, w + j * in, y + j, s);
  if (count - j == 2) rows_times<2>(x, rows, w + j * in, y + j, s);
  else if (count - j == 1) rows_times<1>(x, rows, w + j * in, y + j, s);
}

FLEET_AVX2 void add(float* y, const float* x, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

#undef FLEET_AVX2

#else  // not x86-64: callers keep the BLAS GEMM

bool available() { return false; }

void linear(const float*, std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, float*, std::int64_t,
            bool) {
  throw std::logic_error("AVX2 small-batch linear called on a CPU without AVX2");
}

void add(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

#endif

}  // namespace fleet::model::small_batch
