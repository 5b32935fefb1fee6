#include "deltazip/torch/low_rank_compressor.h"

#include <torch/torch.h>

#include "common/error.h"

namespace fleet::deltazip {
namespace {

// Each factor: dense, one symmetric min/max scale per row, at the form's bits.
CompressionOptions factor_options(const CompressionOptions& o) {
  CompressionOptions f;
  f.bits = o.bits;
  f.symmetric = true;
  f.grid = GridFit::kMinMax;
  f.group_size = -1;
  f.damp = o.damp;
  f.block_size = o.block_size;
  f.act_order = false;
  return f;
}

}  // namespace

LowRankBasis::LowRankBasis(const torch::Tensor& delta, const torch::Tensor& hessian, double damp) {
  torch::NoGradGuard no_grad;
  if (delta.dim() != 2) throw InputError("a low-rank delta must be a matrix");
  const auto cols = delta.size(1);
  if (hessian.dim() != 2 || hessian.size(0) != cols || hessian.size(1) != cols)
    throw InputError("the Hessian must be [" + std::to_string(cols) + ", " + std::to_string(cols) + "]");
  delta_ = delta.to(torch::kFloat64);
  hessian_ = hessian;
  // Damped as the sweep damps it; inputs that never fire get a unit diagonal.
  damped_ = hessian.to(torch::kFloat64).clone();
  damped_.diagonal().masked_fill_(damped_.diagonal() == 0, 1.0);
  damped_.diagonal().add_(std::max(damp, 1e-6) * damped_.diagonal().mean().item<double>());
  // tr(E H Eᵀ) = ‖E S‖² with H = S Sᵀ: the best rank-r approximation of D S
  // is its truncated SVD U Σ Vᵀ, so Δ ≈ U · (Σ Vᵀ S⁻¹); the singular values
  // go with down, whose rows each get a scale, and up is refitted to the
  // quantized down (compress). The SVD itself is not needed: the eigenvectors
  // of the smaller Gram matrix give the same directions at a fraction of the
  // cost (1024 x 2816 in float64 on one core: 4.5 s against 20 s for the SVD).
  //   rows <= cols: D H Dᵀ = U Σ² Uᵀ, and Σ Vᵀ S⁻¹ = Uᵀ D S S⁻¹ = Uᵀ D;
  //   rows > cols:  Sᵀ Dᵀ D S = V Σ² Vᵀ, and Σ Vᵀ S⁻¹ by a triangular solve.
  // eigh lists eigenvalues ascending: flipped, the strongest direction first.
  if (delta_.size(0) <= cols) {
    const auto gram = delta_.matmul(damped_).matmul(delta_.t());
    u_ = std::get<1>(torch::linalg_eigh(gram)).flip({1});
  } else {
    cholesky_ = torch::linalg_cholesky(damped_);
    const auto ds = delta_.matmul(cholesky_);
    auto [values, vectors] = torch::linalg_eigh(ds.t().matmul(ds));
    sigma_ = values.flip({0}).clamp_min(0).sqrt();
    v_ = vectors.flip({1});
  }
}

LowRankCompressed LowRankBasis::compress(const CompressionOptions& o) const {
  o.validate();
  if (!o.low_rank()) throw UsageError("a low-rank compression needs a rank");
  torch::NoGradGuard no_grad;
  const auto rank = o.rank_for(delta_.size(0), delta_.size(1));
  torch::Tensor down;
  if (u_.defined()) {
    down = u_.narrow(1, 0, rank).t().matmul(delta_);
  } else {  // Σᵣ Vᵣᵀ S⁻¹ = Σᵣ (S⁻ᵀ Vᵣ)ᵀ: one triangular solve
    down = torch::linalg_solve_triangular(cholesky_.t(), v_.narrow(1, 0, rank), /*upper=*/true).t();
    down = down * sigma_.narrow(0, 0, rank).unsqueeze(1);
  }
  const auto fo = factor_options(o);
  LowRankCompressed out;
  out.down = obs_compress(down.to(torch::kFloat32), hessian_, fo);
  // up = argmin ‖(D − up·B) S‖ for the quantized B: D H Bᵀ (B H Bᵀ)⁻¹, with a
  // little damping in case quantizing zeroed a direction.
  const auto B = out.down.dequantized.to(torch::kFloat64);
  const auto BH = B.matmul(damped_);
  auto gram = BH.matmul(B.t());
  gram.diagonal().add_(1e-9 * gram.diagonal().mean().item<double>() + 1e-30);
  const auto up = torch::linalg_solve(gram, BH.matmul(delta_.t())).t();
  // The up factor's inputs are down · x: their Hessian is B H Bᵀ.
  const auto up_hessian = B.matmul(hessian_.to(torch::kFloat64)).matmul(B.t()).to(torch::kFloat32);
  out.up = obs_compress(up.to(torch::kFloat32), up_hessian, fo);
  out.dequantized = out.up.dequantized.matmul(out.down.dequantized);
  return out;
}

LowRankCompressed low_rank_compress(const torch::Tensor& delta, const torch::Tensor& hessian,
                                    const CompressionOptions& options) {
  options.validate();
  return LowRankBasis(delta, hessian, options.damp).compress(options);
}

LowRankMatrix LowRankCompressed::pack(const CompressionOptions& options) const {
  const auto fo = factor_options(options);
  return {up.pack(fo), down.pack(fo)};
}

}  // namespace fleet::deltazip
