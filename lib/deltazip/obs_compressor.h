// Joint pruning and quantization of one delta matrix with second-order error
// compensation (SparseGPT + GPTQ, one Optimal-Brain-Surgeon sweep), and the
// round-to-nearest baseline. Include only from torch targets.
#pragma once

#include <cstdint>

#include <torch/types.h>

#include "deltazip/packing.h"

namespace fleet::deltazip {

struct CompressionOptions {
  int bits = 4;  ///< 2, 3, 4 or 8
  bool symmetric = true;
  std::int64_t group_size = -1;  ///< input columns per scale; -1: one per row
  SparsityPattern sparsity;
  bool act_order = false;  ///< process columns by descending Hessian diagonal
  double damp = 0.01;      ///< added to the diagonal, as a fraction of its mean
  std::int64_t block_size = 128;

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
