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

LowRankCompressed low_rank_compress(const torch::Tensor& delta, const torch::Tensor& hessian,
                                    const CompressionOptions& o) {
  o.validate();
  if (!o.low_rank()) throw UsageError("low_rank_compress needs a rank");
  torch::NoGradGuard no_grad;
  const auto rows = delta.size(0), cols = delta.size(1);
  if (hessian.dim() != 2 || hessian.size(0) != cols || hessian.size(1) != cols)
    throw InputError("the Hessian must be [" + std::to_string(cols) + ", " + std::to_string(cols) + "]");
  const auto rank = o.rank_for(rows, cols);
  auto D = delta.to(torch::kFloat64);
  // Damped as the sweep damps it; inputs that never fire get a unit diagonal.
  auto H = hessian.to(torch::kFloat64).clone();
  H.diagonal().masked_fill_(H.diagonal() == 0, 1.0);
  H.diagonal().add_(std::max(o.damp, 1e-6) * H.diagonal().mean().item<double>());
  // tr(E H Eᵀ) = ‖E S‖² with H = S Sᵀ: the best rank-r approximation of D S is
  // its truncated SVD U Σ Vᵀ, so Δ ≈ U · (Σ Vᵀ S⁻¹). The singular values go
  // with down, whose rows each get a scale: up's columns stay orthonormal,
  // of one magnitude, as its per-row scales want.
  const auto S = torch::linalg_cholesky(H);
  auto [U, sigma, Vh] = torch::linalg_svd(D.matmul(S), /*full_matrices=*/false);
  U = U.narrow(1, 0, rank);
  // Vᵣᵀ S⁻¹ = (S⁻ᵀ Vᵣ)ᵀ: one triangular solve.
  auto down = torch::linalg_solve_triangular(S.t(), Vh.narrow(0, 0, rank).t(), /*upper=*/true).t();
  down = down * sigma.narrow(0, 0, rank).unsqueeze(1);
  const auto fo = factor_options(o);
  LowRankCompressed out;
  out.down = obs_compress(down.to(torch::kFloat32), hessian, fo);
  // up = argmin ‖(D − up·B) S‖ for the quantized B: D H Bᵀ (B H Bᵀ)⁻¹, with a
  // little damping in case quantizing zeroed a direction.
  const auto B = out.down.dequantized.to(torch::kFloat64);
  auto gram = B.matmul(H).matmul(B.t());
  gram.diagonal().add_(1e-9 * gram.diagonal().mean().item<double>() + 1e-30);
  const auto up = torch::linalg_solve(gram, B.matmul(H).matmul(D.t())).t();
  // The up factor's inputs are down · x: their Hessian is B H Bᵀ.
  const auto up_hessian = B.matmul(hessian.to(torch::kFloat64)).matmul(B.t()).to(torch::kFloat32);
  out.up = obs_compress(up.to(torch::kFloat32), up_hessian, fo);
  out.dequantized = out.up.dequantized.matmul(out.down.dequantized);
  return out;
}

LowRankMatrix LowRankCompressed::pack(const CompressionOptions& options) const {
  const auto fo = factor_options(options);
  return {up.pack(fo), down.pack(fo)};
}

}  // namespace fleet::deltazip
