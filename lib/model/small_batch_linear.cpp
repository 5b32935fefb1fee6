#include "model/small_batch_linear.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "common/cpu_isa.h"
#include "common/simd_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace fleet::model::small_batch {

#if defined(__x86_64__)

// Every function that touches vectors carries its target itself
// (FLEET_AVX2, common/simd_x86.h), so nothing outside them needs AVX2 or AVX-512.
using simd::sum_lanes;

namespace {

struct Strides {
  std::int64_t in, x, y;
  bool accumulate;
};

// Weights the kernel will read next, fetched into L2 while it multiplies the
// current block: decoding streams every weight of the model from memory at
// every step, and without this the FMAs wait for each block in turn
// (bench_dz_serve streamed: 2048 x 768 products over 400 MB of weights,
// one core of a Xeon, AVX-512: 1.10x faster with 16 rows of x, 1.22x with
// 32, 1.20x with 64; AVX2 1.24x and 1.29x at 16 and 32).
// A block's lines are spread over its groups of rows and, within a group,
// over the iterations of its inner loop.
struct Prefetch {
  const char* first = nullptr;  // this group's share of the next block
  std::int64_t lines = 0;       // cache lines in it
  std::int64_t per_step = 0;    // of them per inner iteration

  static constexpr std::int64_t kLine = 64;
  // With fewer groups of rows the loop only streams W, which the hardware
  // prefetcher keeps up with alone: prefetching too made 1-2 rows 10 %
  // slower and 4-8 rows no faster (bench_dz_serve streamed).
  static constexpr std::int64_t kMinGroups = 4;

  static Prefetch share(const float* block, std::int64_t floats, std::int64_t group, std::int64_t groups,
                        std::int64_t steps) {
    if (block == nullptr || floats <= 0 || steps <= 0 || groups < kMinGroups || !simd::prefetch_in_use()) return {};
    const std::int64_t total = (floats * static_cast<std::int64_t>(sizeof(float)) + kLine - 1) / kLine;
    const std::int64_t mine = (total + groups - 1) / groups;
    const std::int64_t from = std::min(total, group * mine), to = std::min(total, from + mine);
    return {reinterpret_cast<const char*>(block) + from * kLine, to - from, (to - from + steps - 1) / steps};
  }
  // Called once per inner iteration `step`.
  inline void step(std::int64_t i) const { simd::prefetch_l2_share(first, lines, per_step, i); }
};

// AVX2: 3 weight rows x 4 rows of x = 12 accumulators of the 16 registers.
#define KERNEL_TARGET FLEET_AVX2
#define KERNEL_NS avx2
#define Vec __m256
#define WIDTH 8
#define VZERO _mm256_setzero_ps
#define VLOAD _mm256_loadu_ps
#define VFMA _mm256_fmadd_ps
#define VSUM sum_lanes
#define BLOCK_J 3
#include "model/small_batch_linear_kernel.inc"

#define FLEET_AVX512 __attribute__((target("avx512f,avx2,fma")))

// Through memory: GCC 12's own reduction intrinsic warns about an undefined
// register inside it. Once per output, so the store costs nothing that shows.
FLEET_AVX512 inline float sum_lanes_512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return sum_lanes(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
}

// AVX-512: 16 lanes, and 32 registers hold 5 x 4 accumulators.
#define KERNEL_TARGET FLEET_AVX512
#define KERNEL_NS avx512
#define Vec __m512
#define WIDTH 16
#define VZERO _mm512_setzero_ps
#define VLOAD _mm512_loadu_ps
#define VFMA _mm512_fmadd_ps
#define VSUM sum_lanes_512
#define BLOCK_J 5
#include "model/small_batch_linear_kernel.inc"

std::atomic<bool> avx512_wanted{true};

}  // namespace

bool available() { return cpu_isa() >= CpuIsa::kAvx2; }

bool avx512_available() { return cpu_isa() >= CpuIsa::kAvx512; }

void use_avx512(bool on) { avx512_wanted = on; }
bool avx512_in_use() { return avx512_wanted && avx512_available(); }
// Where BLAS's packed GEMM starts to win (bench_dz_serve sbmm and merged,
// docs/benchmarks.md). Against BLAS kernels of AVX-512: from 64 rows with
// AVX-512 here, from 32 with AVX2 (a CPU whose kernels here are capped).
// Against BLAS kernels of AVX2: from about 96 rows with AVX2 here, as on a
// CPU without AVX-512. With AVX-512 here and BLAS kernels of AVX2 (an
// AVX-512 CPU that OpenBLAS runs with AVX2 kernels, as Debian's does on AMD
// Zen 4) BLAS did not win at any size measured, up to 256 rows of up to
// 4096 floats (the kernel took 0.54-0.94x BLAS's time at 96-256 rows); past
// that the kernel reads x from further away for every block of weight rows,
// so its limit keeps x within what was measured (4 MiB), and never below 64.
std::int64_t max_rows(std::int64_t in) {
  const bool blas_avx512 = blas_cpu_isa() >= CpuIsa::kAvx512;
  if (!avx512_in_use()) return blas_avx512 ? 32 : 96;
  if (blas_avx512) return 64;
  constexpr std::int64_t kMeasuredRows = 256, kMeasuredFloats = 256 * 4096;
  if (in <= 0) return kMeasuredRows;
  return std::clamp<std::int64_t>(kMeasuredFloats / in, 64, kMeasuredRows);
}

void linear(const float* x, std::int64_t rows, std::int64_t in, std::int64_t x_stride, const float* w,
            std::int64_t count, float* y, std::int64_t y_stride, bool accumulate) {
  const Strides s{in, x_stride, y_stride, accumulate};
  if (avx512_in_use())
    avx512::linear(x, rows, w, count, y, s);
  else
    avx2::linear(x, rows, w, count, y, s);
}

#undef FLEET_AVX2
#undef FLEET_AVX512

#else  // not x86-64: callers keep the BLAS GEMM

bool available() { return false; }
bool avx512_available() { return false; }
void use_avx512(bool) {}
bool avx512_in_use() { return false; }
std::int64_t max_rows(std::int64_t) { return 0; }

void linear(const float*, std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, float*, std::int64_t,
            bool) {
  throw std::logic_error("AVX2 small-batch linear called on a CPU without AVX2");
}

#endif

}  // namespace fleet::model::small_batch
