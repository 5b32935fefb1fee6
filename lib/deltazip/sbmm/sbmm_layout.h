// The packed form of one delta matrix as plain arrays: what the SBMM kernels
// read, on the CPU (sbmm.h) and on a GPU (cuda/sbmm_cuda.h). C++17, no
// library types, so that nvcc compiles it as well.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fleet::deltazip {

struct SbmmLayout {
  enum Kind { kDense = 0, kNOfM = 1, kUnstructured = 2 };
  std::int64_t rows = 0, cols = 0;
  std::int64_t group_size = 0, groups = 0;  ///< input columns per scale; scales per row
  int bits = 0;                             ///< per code, LSB-first stream of the kept weights, row-major
  int kind = kDense;
  int n = 0, m = 0;                     ///< n:m: n of every m pruned
  int index_bits = 0;                   ///< n:m: bits per position in its group
  const std::uint8_t* codes = nullptr;  ///< followed by at least 8 readable bytes
  std::size_t code_bytes = 0;
  const std::uint8_t* indices = nullptr;  ///< n:m positions, or 1 bit per weight (unstructured)
  std::size_t index_bytes = 0;
  const float* scales = nullptr;  ///< [rows, groups], as level_map gives them
  const float* zeros = nullptr;   ///< [rows, groups]
  /// Non-uniform grid: each group's 2^bits levels, [rows, groups, 2^bits];
  /// then scales and zeros are null.
  const float* levels = nullptr;
  const std::uint64_t* row_code_bit = nullptr;  ///< unstructured: first code bit of each row, rows + 1 entries
};

}  // namespace fleet::deltazip
