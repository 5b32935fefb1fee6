// Products with a compressed delta straight from its packed form: the CPU
// half of DeltaZip's selective batched matrix multiply (SBMM). Every linear
// layer of a mixed batch computes x·W_baseᵀ once and, for each variant's
// rows, x_rows·Δᵀ with the variant's packed delta. Decoding is memory-bound,
// so reading 2-4-bit codes instead of 32-bit weights is where the time goes
// down; one output row of Δ is decoded at a time into a buffer the size of
// one row (it stays in L1) and used for every input row. No libtorch.
#pragma once

#include <cstdint>
#include <vector>

#include "deltazip/packing.h"
#include "deltazip/sbmm/sbmm_layout.h"

namespace fleet::deltazip {

/// A packed delta matrix prepared for products: the packed bytes (padded so
/// the decoder reads whole 64-bit words), float scales and zero points, and
/// where each output row starts in the code and index streams.
class SbmmMatrix {
 public:
  /// Validates `packed` (InputError for inconsistent sizes).
  explicit SbmmMatrix(const PackedMatrix& packed);

  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  /// Bytes this form keeps in memory.
  std::uint64_t bytes() const;
  /// True for the form with a fused kernel (2:4, one scale per row, 2 or 4
  /// bits, no codebook), which multiply_add runs fast for up to 16 input rows.
  bool fused_2of4() const;
  /// The arrays, for the GPU kernel's upload.
  SbmmLayout layout() const;

  /// Whether the fused 2:4 form runs the x86 kernels (sbmm_2of4_x86.h)
  /// where the CPU has them (the default) or the portable ones everywhere:
  /// for tests and benchmarks that compare the two. Process-wide.
  static void use_vector_kernels(bool enabled);
  /// True when the fused 2:4 form runs the x86 kernels on this CPU now.
  static bool vector_kernels();
  /// Whether those kernels take the AVX-512 width where the CPU has it (the
  /// default) or stay at AVX2: for tests and benchmarks. Process-wide.
  static void use_avx512(bool enabled);
  /// True when the fused 2:4 form runs the AVX-512 kernels now.
  static bool avx512_in_use();

  /// y[r, o] += Σ_c x[r, c] · Δ[o, c] for r < n and o in [row_begin,
  /// row_end): x is n rows of cols() floats `x_stride` apart, y n rows of
  /// rows() floats `y_stride` apart. Touches only the kept weights (the
  /// path for a few rows; many rows go through decode_rows and a dense product).
  /// Disjoint row ranges may run on different threads at once. Each sum is
  /// taken in a fixed order, so the result does not depend on the split.
  void multiply_add(const float* x, std::int64_t n, std::int64_t x_stride, float* y, std::int64_t y_stride,
                    std::int64_t row_begin, std::int64_t row_end) const;

  /// The kept weights of row `o`: their values and columns (each array
  /// cols() long); returns how many.
  std::int64_t kept_row(std::int64_t o, float* values, std::int32_t* columns) const;
  /// Row `o` of Δ, dequantized into `out` (cols() floats).
  void decode_row(std::int64_t o, float* out) const;
  /// Rows [begin, end) of Δ into `out` ((end - begin) x cols(), row-major):
  /// a tile that stays in cache for a BLAS product with many input rows.
  /// With `plus`, the same rows of a dense matrix (row-major, cols() wide)
  /// are added as the tile is written: out = Δ + plus, each sum one float
  /// addition, as adding afterwards would give.
  void decode_rows(std::int64_t begin, std::int64_t end, float* out, const float* plus = nullptr) const;

 private:
  std::int64_t rows_ = 0, cols_ = 0, group_size_ = 0, groups_ = 0;
  int bits_ = 0, index_bits_ = 0;
  SparsityPattern sparsity_;
  std::vector<std::uint8_t> codes_, indices_;  ///< packed streams + 8 bytes of padding
  std::vector<float> scales_, zeros_;          ///< [rows, groups]
  std::vector<float> levels_;                  ///< codebook [rows, groups, 2^bits]: replaces scales and zeros
  std::vector<std::uint64_t> row_code_bit_;    ///< unstructured: first code bit of each row
  bool distinct_positions_ = true;             ///< 2:4: no group names one position twice

  bool order_groups_by_column();
  bool vectorised() const;  ///< fused form on the AVX2 kernels
};

}  // namespace fleet::deltazip
