// A delta stored as the product of two small quantized factors, Δ = up ·
// down with up [rows, rank] and down [rank, cols]: what a fine-tune's delta
// keeps in fewer bits than one per weight where its change lies along a few
// directions (Delta-CoMe's observation). Each factor is an ordinary dense
// packed matrix, so the SBMM kernels multiply by it unchanged. No libtorch.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "deltazip/packing.h"

namespace fleet::deltazip {

struct LowRankMatrix {
  PackedMatrix up;    ///< [rows, rank]
  PackedMatrix down;  ///< [rank, cols]

  std::int64_t rows() const { return up.rows; }
  std::int64_t cols() const { return down.cols; }
  std::int64_t rank() const { return up.cols; }
  /// Bytes of both factors' arrays.
  std::uint64_t stored_bytes() const;
  /// Stored bits per weight of the delta it represents ([rows, cols]).
  double bits_per_weight() const;
  /// InputError naming `name` when a factor is inconsistent, sparse or on a
  /// codebook, or the factors do not chain (up's columns = down's rows).
  void validate(const std::string& name) const;
};

/// Δ = up · down into `out` [rows, cols], each sum over the rank taken in
/// order in float32.
void unpack_low_rank(const LowRankMatrix& matrix, std::span<float> out);

}  // namespace fleet::deltazip
