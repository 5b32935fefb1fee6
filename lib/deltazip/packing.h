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

/// A group's levels as value = scale * (code - zero): the stored scale and
/// zero point for 2-8 bits; 1-bit codes are the sign grid, code 0 is -scale
/// and code 1 +scale (scale 2s, zero 0.5; the stored zero point is 0).
struct LevelMap {
  float scale = 0, zero = 0;
};
inline LevelMap level_map(int bits, float stored_scale, std::uint8_t stored_zero) {
  if (bits == 1) return {2 * stored_scale, 0.5f};
  return {stored_scale, static_cast<float>(stored_zero)};
}

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
  std::vector<std::uint16_t> scales;  ///< float16 bits, [rows, groups]; empty with a codebook
  std::vector<std::uint8_t> zeros;    ///< integer zero points, [rows, groups] (all 0 at 1 bit); empty with a codebook
  /// Non-uniform grid: float16 bits of each group's levels, [rows, groups,
  /// 2^bits], code k meaning level k. Empty for the affine grids.
  std::vector<std::uint16_t> codebook;

  std::int64_t groups() const { return (cols + group_size - 1) / group_size; }
  bool has_codebook() const { return !codebook.empty(); }
  /// Bytes of codes, indices, scales, zeros and codebook together.
  std::uint64_t stored_bytes() const;
  /// Stored bits per weight of the matrix, metadata included.
  double bits_per_weight() const;
  /// Throws InputError when sizes disagree (a corrupt or truncated container).
  void validate(const std::string& name) const;
};

/// Packs a quantized matrix: `codes` and `kept` are [rows, cols] row-major
/// (codes of pruned weights are ignored); n:m patterns need exactly m - n kept
/// weights in every group of m. `scales` are float16 bits. With a
/// `codebook` (float16 bits, [rows, groups, 2^bits]) the scales and zero
/// points are empty.
PackedMatrix pack_matrix(std::int64_t rows, std::int64_t cols, int bits, std::int64_t group_size,
                         const SparsityPattern& sparsity, std::span<const std::uint8_t> codes,
                         std::span<const std::uint8_t> kept, std::vector<std::uint16_t> scales,
                         std::vector<std::uint8_t> zeros, std::vector<std::uint16_t> codebook = {});

/// Dequantizes into `out` [rows, cols]: the level of each kept weight's
/// code (level_map), exactly 0 for pruned ones.
void unpack_matrix(const PackedMatrix& packed, std::span<float> out);

}  // namespace fleet::deltazip
