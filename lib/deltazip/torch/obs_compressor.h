// Joint pruning and quantization of one delta matrix with second-order error
// compensation (SparseGPT + GPTQ, one Optimal-Brain-Surgeon sweep), and the
// round-to-nearest baseline. Include only from torch targets.
#pragma once

#include <cstdint>
#include <string>

#include <torch/types.h>

#include "deltazip/packing.h"

namespace fleet::deltazip {

/// How a row's (or group's) quantization levels are fitted.
enum class GridFit {
  kMinMax,   ///< uniform over the full range (GPTQ's grid)
  kMse,      ///< uniform, its range clipped to the least squared error
  kTernary,  ///< -s, 0, +s (2-bit codes), s clipped to the least squared error
  kLloyd,    ///< non-uniform: 2^bits levels per row or group fitted by Lloyd's algorithm, stored as a codebook
};

/// "minmax", "mse", "ternary" or "lloyd"; UsageError otherwise.
GridFit parse_grid_fit(const std::string& text);
std::string to_string(GridFit fit);

struct CompressionOptions {
  int bits = 4;  ///< 1 (sign x scale), 2, 3, 4 or 8
  bool symmetric = true;
  GridFit grid = GridFit::kMinMax;
  std::int64_t group_size = -1;  ///< input columns per scale; -1: one per row
  SparsityPattern sparsity;
  bool act_order = false;  ///< process columns by descending Hessian diagonal
  double damp = 0.01;      ///< added to the diagonal, as a fraction of its mean
  std::int64_t block_size = 128;
  /// Low rank (low_rank_compressor.h): the delta as up [rows, rank] · down
  /// [rank, cols], each factor dense at `bits` with one scale per row. A
  /// fixed `rank`, or `rank_bits` > 0: the rank whose factors' codes take
  /// about that many bits per weight of the delta (the size budget's forms,
  /// which fit every shape). Both 0: not low rank.
  std::int64_t rank = 0;
  double rank_bits = 0;

  bool low_rank() const { return rank > 0 || rank_bits > 0; }
  /// The rank for a [rows, cols] delta: at least 1, at most the smaller side.
  std::int64_t rank_for(std::int64_t rows, std::int64_t cols) const;

  /// UsageError for unsupported values (bits, group size, block size vs n:m).
  void validate() const;
};

/// The result for one matrix [rows, cols].
struct CompressedMatrix {
  torch::Tensor dequantized;  ///< float32: what reconstruction yields (pruned = 0)
  torch::Tensor codes;        ///< uint8 [rows, cols]
  torch::Tensor kept;         ///< bool [rows, cols]
  torch::Tensor scales;       ///< float32 [rows, groups], exactly representable in float16
  torch::Tensor zeros;        ///< uint8 [rows, groups]
  torch::Tensor codebook;     ///< float32 [rows, groups, 2^bits], exact in float16: lloyd only (then no scales)
  double loss = 0;            ///< sum over columns of (w - q)^2 / (2 U_cc^2), the OBS loss
  torch::Tensor hessian;      ///< the damped Hessian the sweep used (for checking the loss)
  torch::Tensor weight;       ///< the matrix after dead-column zeroing (likewise)

  /// Storage form (codes, positions or mask, float16 scales, zero points).
  PackedMatrix pack(const CompressionOptions& options) const;
};

/// Compresses `weight` [rows, cols] given the Hessian `hessian` [cols, cols]
/// of its inputs (2/n sum x x^T). Columns whose inputs never fire (zero
/// diagonal) are zeroed. Columns are grouped for n:m pruning along the input
/// dimension. With a diagonal Hessian this is exactly round-to-nearest.
CompressedMatrix obs_compress(const torch::Tensor& weight, const torch::Tensor& hessian,
                              const CompressionOptions& options);

/// Round-to-nearest with magnitude pruning: the baseline (an identity Hessian).
CompressedMatrix rtn_compress(const torch::Tensor& weight, const CompressionOptions& options);

}  // namespace fleet::deltazip
