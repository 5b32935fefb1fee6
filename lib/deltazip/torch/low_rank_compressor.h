// A delta compressed to two small quantized factors (low_rank.h): the
// directions that carry most of the layer's output change, found with the
// Hessian of its inputs, each factor then quantized by the same OBS sweep
// as a full matrix. Include only from torch targets.
#pragma once

#include <torch/types.h>

#include "deltazip/low_rank.h"
#include "deltazip/torch/obs_compressor.h"

namespace fleet::deltazip {

struct LowRankCompressed {
  torch::Tensor dequantized;  ///< float32 [rows, cols]: up · down as reconstruction yields it
  CompressedMatrix up, down;  ///< the factors, [rows, rank] and [rank, cols]

  /// Storage form of both factors.
  LowRankMatrix pack(const CompressionOptions& options) const;
};

/// The directions of one delta under one Hessian, found once for every rank
/// asked of them (the size budget tries several): the damped Hessian H and
/// the left singular vectors of delta · S (S Sᵀ = H), or its right ones with
/// S and the singular values, whichever side of the delta is smaller.
class LowRankBasis {
 public:
  /// InputError when `hessian` is not [cols, cols].
  LowRankBasis(const torch::Tensor& delta, const torch::Tensor& hessian, double damp);
  /// The delta at `options.rank_for(rows, cols)` (options.damp is the basis's).
  LowRankCompressed compress(const CompressionOptions& options) const;

 private:
  torch::Tensor delta_, hessian_, damped_;
  torch::Tensor u_;                     ///< rows <= cols: D H Dᵀ's eigenvectors, strongest first
  torch::Tensor cholesky_, sigma_, v_;  ///< rows > cols: S, the singular values and V of D S
};

/// Compresses `delta` [rows, cols] at `options.rank_for(rows, cols)` given the
/// Hessian `hessian` [cols, cols] of its inputs (an identity: the plain
/// squared error). The rank-r approximation with the least output error
/// tr(E H Eᵀ) is the truncated SVD of delta · S with S Sᵀ = H (damped),
/// found from the eigenvectors of the smaller Gram matrix:
/// down = Σ Vᵀ S⁻¹ is quantized first against H; up is then refitted to the
/// quantized down by least squares in the same metric and quantized against
/// the Hessian of its own inputs, down · x.
LowRankCompressed low_rank_compress(const torch::Tensor& delta, const torch::Tensor& hessian,
                                    const CompressionOptions& options);

}  // namespace fleet::deltazip
