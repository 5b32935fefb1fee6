// Storage form of an embedding delta: only the rows that changed, each
// quantized symmetrically with its own float16 scale. A fine-tune moves the
// rows of the tokens it saw; the rest stay (near) zero and cost nothing.
// Layout in docs/formats.md ("DeltaZip container"). No libtorch.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fleet::deltazip {

/// A [rows, cols] delta, row-sparse and quantized.
struct RowDelta {
  std::int64_t rows = 0, cols = 0;
  int bits = 8;                         ///< 2..8: levels -(2^(bits-1)-1) .. 2^(bits-1)-1
  std::vector<std::int32_t> kept_rows;  ///< strictly increasing row indices
  std::vector<std::uint8_t> codes;      ///< [kept, cols] level + 2^(bits-1), packed LSB-first to `bits`
  std::vector<std::uint16_t> scales;    ///< float16 bits, one per kept row

  /// Bytes of rows, codes and scales together.
  std::uint64_t stored_bytes() const;
  /// Throws InputError when sizes or row indices disagree (a corrupt or
  /// truncated container).
  void validate(const std::string& name) const;
};

/// Encodes `delta` [rows, cols]: a row is left out when every value of it
/// would round to zero under one scale for the whole tensor at `bits`
/// (max |row| < max |delta| / (2 (2^(bits-1) - 1))); the others keep their
/// own scale max |row| / (2^(bits-1) - 1). UsageError for bits outside 2..8.
RowDelta encode_row_delta(std::span<const float> delta, std::int64_t rows, std::int64_t cols, int bits);

/// Decodes into `out` [rows, cols]: scale * level for kept rows, exactly 0
/// for the others.
void decode_row_delta(const RowDelta& delta, std::span<float> out);

}  // namespace fleet::deltazip
