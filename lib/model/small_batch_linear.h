// y = x · Wᵀ for a few rows of x (a decode step's batch), without packing W.
//
// A BLAS GEMM copies ("packs") the weight matrix into its own layout on every
// call; with 16 rows of x that copy costs about as much as the arithmetic,
// and decoding runs the model's every weight through it at every step. This
// kernel reads W where it is, once per call: blocks of three weight rows
// stay in L1 while up to four rows of x at a time are multiplied against
// them (twelve running sums in registers), and x stays in L2. AVX2+FMA, or
// AVX-512 where the CPU has it (five weight rows, twenty sums), compiled per
// function and chosen at run time; callers check available().
// Every output is one dot product summed in a fixed order, so the result
// does not depend on the thread count or on how the rows were grouped.
#pragma once

#include <cstdint>

namespace fleet::model::small_batch {

/// True when this CPU runs AVX2 and FMA (x86-64 only) and GPUFLEET_CPU_ISA
/// does not cap the kernels below that (common/cpu_isa.h).
bool available();
/// True when it also runs AVX-512F, uncapped: linear() then uses 16-lane vectors and
/// twice the accumulators, unless use_avx512(false) turned that off (tests
/// and benchmarks compare the two; process-wide).
bool avx512_available();
void use_avx512(bool on);
bool avx512_in_use();

/// Rows of x, each of `in` floats (0: not known), up to which the kernel
/// beats OpenBLAS's GEMM (bench_dz_serve sbmm and merged,
/// docs/benchmarks.md): with AVX-512, 64 against BLAS kernels of AVX-512 and
/// up to 256 against those of AVX2 (fewer for rows of more than 4096
/// floats, never under 64); with AVX2, 32 and 96 (common/cpu_isa.h,
/// blas_cpu_isa).
std::int64_t max_rows(std::int64_t in = 0);

/// y[r, j] = Σ_k x[r, k] · w[j, k] (or += with `accumulate`) for r < rows and
/// j < count. w is count x in, dense and row-major; the rows of x (in floats
/// each) and of y (count floats used) are x_stride and y_stride floats apart.
void linear(const float* x, std::int64_t rows, std::int64_t in, std::int64_t x_stride, const float* w,
            std::int64_t count, float* y, std::int64_t y_stride, bool accumulate = false);

}  // namespace fleet::model::small_batch
