// Storage form of a compressed delta matrix: low-bit integer codes of the
// kept weights, packed LSB-first; n:m positions or an unstructured bitmask;
// per-row (or per-group) scales and zero points. No libtorch.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fleet::deltazip {

/// Packs `codes` (each below 2^bits) into bytes, LSB first; bits in 1..8.
std::vector<std::uint8_t> pack_bits(std::span<const std::uint8_t> codes, int bits);
/// The first `count` codes of `packed`; InputError when `packed` is too short.
std::vector<std::uint8_t> unpack_bits(std::span<const std::uint8_t> packed, int bits, std::size_t count);

/// Which weights a matrix keeps.
struct SparsityPattern {
  enum class Kind { kDense, kNOfM, kUnstructured } kind = Kind::kDense;
  int n = 0, m = 0;     ///< n:m: n of every m weights pruned
  double fraction = 0;  ///< unstructured: share of weights pruned

  /// "none", "2:4", "4:8" (N:M prunes N of every M along the input dimension,
  /// as in 2:4 sparsity: 2 of 4 zero), or a fraction in (0, 1) pruned
  /// unstructured. UsageError otherwise.
  static SparsityPattern parse(const std::string& text);
  std::string to_string() const;
  /// Weights kept per group of m (n:m only).
  int kept_per_group() const { return m - n; }
};

/// One quantized, possibly sparse matrix [rows, cols] in storage form.
struct PackedMatrix {
  std::int64_t rows = 0, cols = 0;
  int bits = 4;
  std::int64_t group_size = 0;  ///< input columns per scale (cols: one per row)
  SparsityPattern sparsity;
  std::vector<std::uint8_t> codes;  ///< codes of the kept weights, row-major, packed to `bits`
  std::vector<std::uint8_t>
      indices;  ///< n:m: position of each kept weight in its group, packed to log2(m) bits; unstructured: 1 bit per weight
  std::vector<std::uint16_t> scales;  ///< float16 bits, [rows, groups]
  std::vector<std::uint8_t> zeros;    ///< integer zero points, [rows, groups]

  std::int64_t groups() const { return (cols + group_size - 1) / group_size; }
  /// Bytes of codes, indices, scales and zeros together.
  std::uint64_t stored_bytes() const;
  /// Stored bits per weight of the matrix, metadata included.
  double bits_per_weight() const;
  /// Throws InputError when sizes disagree (a corrupt or truncated container).
  void validate(const std::string& name) const;
};

/// Packs a quantized matrix: `codes` and `kept` are [rows, cols] row-major
/// (codes of pruned weights are ignored); n:m patterns need exactly m - n kept
/// weights in every group of m. `scales` are float16 bits.
PackedMatrix pack_matrix(std::int64_t rows, std::int64_t cols, int bits, std::int64_t group_size,
                         const SparsityPattern& sparsity, std::span<const std::uint8_t> codes,
                         std::span<const std::uint8_t> kept, std::vector<std::uint16_t> scales,
                         std::vector<std::uint8_t> zeros);

/// Dequantizes into `out` [rows, cols]: scale * (code - zero) for kept
/// weights, exactly 0 for pruned ones.
void unpack_matrix(const PackedMatrix& packed, std::span<float> out);

}  // namespace fleet::deltazip
