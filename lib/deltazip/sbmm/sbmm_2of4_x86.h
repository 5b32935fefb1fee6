// x86 kernels for the most common packed delta form: 2:4 sparsity, one
// scale per row, 2- or 4-bit codes (SbmmMatrix::fused_2of4). Eight columns
// (two groups of four; AVX2) or sixteen (AVX-512) are decoded at once into a
// dense vector of weights, zeros at the pruned positions, from the position
// bytes and the code bytes; x is then read contiguously, no gathers. Each
// function is compiled for its instruction set alone, so the rest of the
// library keeps the baseline ISA; callers check the *_available() first.
#pragma once

#include <cstdint>

#include "deltazip/sbmm/sbmm_layout.h"

namespace fleet::deltazip::x86 {

/// True when this CPU runs AVX2 and FMA (x86-64 only) and GPUFLEET_CPU_ISA
/// does not cap the kernels below that (common/cpu_isa.h).
bool avx2_available();
/// True when it also runs AVX-512F, uncapped.
bool avx512_available();

/// y[r, o] += Σ_c x[r, c] · Δ[o, c], as SbmmMatrix::multiply_add, for a
/// fused 2:4 layout whose groups keep two distinct positions and whose
/// column count is a multiple of 8 (zero points are integers, as the
/// container stores them). Each row's scale multiplies the finished sum
/// instead of every weight, so results equal the portable kernel's to
/// rounding, not bit for bit; each sum is taken in a fixed order that
/// depends on the instruction set only (4 input rows at a time with AVX2,
/// 8 with AVX-512).
void multiply_add_2of4_avx2(const SbmmLayout& layout, const float* x, std::int64_t n, std::int64_t x_stride, float* y,
                            std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end);
void multiply_add_2of4_avx512(const SbmmLayout& layout, const float* x, std::int64_t n, std::int64_t x_stride, float* y,
                              std::int64_t y_stride, std::int64_t row_begin, std::int64_t row_end);

/// Rows [begin, end) of Δ into `out` ((end - begin) x cols, row-major), as
/// SbmmMatrix::decode_rows: bit for bit the same values.
void decode_rows_2of4_avx2(const SbmmLayout& layout, std::int64_t begin, std::int64_t end, float* out,
                           const float* plus);
void decode_rows_2of4_avx512(const SbmmLayout& layout, std::int64_t begin, std::int64_t end, float* out,
                             const float* plus);

}  // namespace fleet::deltazip::x86
