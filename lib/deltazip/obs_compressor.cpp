#include "deltazip/obs_compressor.h"

#include <cmath>
#include <cstring>

#include <torch/torch.h>

#include "common/error.h"
#include "common/half.h"

namespace fleet::deltazip {
namespace {

// Per-row min/max quantization grid, as GPTQ's quantizer defines it, with
// scales rounded to float16 so that stored and used grids are identical.
struct Grid {
  torch::Tensor scale, zero;  // [rows, 1] float32
};

Grid find_grid(const torch::Tensor& w, int bits, bool symmetric) {
  const double maxq = std::pow(2.0, bits) - 1;
  auto zero_t = torch::zeros({w.size(0)}, w.options());
  auto xmin = torch::minimum(std::get<0>(w.min(1)), zero_t);
  auto xmax = torch::maximum(std::get<0>(w.max(1)), zero_t);
  if (symmetric) {
    xmax = torch::maximum(xmin.abs(), xmax);
    xmin = torch::where(xmin < 0, -xmax, xmin);
  }
  auto flat = (xmin == 0) & (xmax == 0);
  xmin = torch::where(flat, torch::full_like(xmin, -1.0), xmin);
  xmax = torch::where(flat, torch::full_like(xmax, 1.0), xmax);
  auto scale = ((xmax - xmin) / maxq).to(torch::kHalf).to(torch::kFloat32);
  // Float16 has no smaller step; a zero scale would divide by zero.
  scale = scale.clamp_min(f16_to_float(1));
  torch::Tensor zero =
      symmetric ? torch::full_like(scale, std::floor((maxq + 1) / 2)) : torch::round(-xmin / scale).clamp(0, maxq);
  return {scale.unsqueeze(1), zero.unsqueeze(1)};
}

torch::Tensor quantize_codes(const torch::Tensor& w, const Grid& g, int bits) {
  const double maxq = std::pow(2.0, bits) - 1;
  return torch::clamp(torch::round(w / g.scale.squeeze(1)) + g.zero.squeeze(1), 0, maxq);
}

}  // namespace

void CompressionOptions::validate() const {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8) throw UsageError("--bits must be 2, 3, 4 or 8");
  if (group_size == 0 || group_size < -1) throw UsageError("--group-size must be -1 (per row) or positive");
  if (block_size <= 0) throw UsageError("--block-size must be positive");
  if (!(damp >= 0)) throw UsageError("--damp must be >= 0");
  if (sparsity.kind == SparsityPattern::Kind::kNOfM && block_size % sparsity.m != 0)
    throw UsageError("--block-size must be a multiple of the n:m group (" + std::to_string(sparsity.m) + ")");
}

CompressedMatrix obs_compress(const torch::Tensor& weight, const torch::Tensor& hessian, const CompressionOptions& o) {
  o.validate();
  torch::NoGradGuard no_grad;
  auto W = weight.to(torch::kFloat32).clone();
  auto H = hessian.to(torch::kFloat32).clone();
  const std::int64_t rows = W.size(0), cols = W.size(1);
  if (H.dim() != 2 || H.size(0) != cols || H.size(1) != cols)
    throw InputError("the Hessian must be [" + std::to_string(cols) + ", " + std::to_string(cols) + "]");
  if (o.sparsity.kind == SparsityPattern::Kind::kNOfM && cols % o.sparsity.m != 0)
    throw InputError("n:m sparsity needs the input dimension (" + std::to_string(cols) + ") to be a multiple of " +
                     std::to_string(o.sparsity.m));
  const std::int64_t group = o.group_size < 0 ? cols : o.group_size;
  const std::int64_t groups = (cols + group - 1) / group;

  // Inputs that never fire carry no information: their weights go to zero.
  auto dead = H.diagonal() == 0;
  H.diagonal().masked_fill_(dead, 1.0);
  W.index_put_({torch::indexing::Slice(), dead}, 0.0);

  // Damping keeps the inverse well conditioned.
  H.diagonal().add_(o.damp * H.diagonal().mean().item<double>());
  auto damped_hessian = H.clone();
  auto original_weight = W.clone();

  torch::Tensor perm, inverse_perm;
  if (o.act_order) {
    if (o.sparsity.kind == SparsityPattern::Kind::kNOfM) {
      // Reorder whole n:m groups (by their summed diagonal), so that every
      // group of m stays m consecutive input columns.
      const std::int64_t m = o.sparsity.m;
      auto group_order = torch::argsort(H.diagonal().view({cols / m, m}).sum(1), 0, /*descending=*/true);
      perm = (group_order.unsqueeze(1) * m + torch::arange(m, group_order.options()).unsqueeze(0)).flatten();
    } else {
      perm = torch::argsort(H.diagonal(), 0, /*descending=*/true);
    }
    inverse_perm = torch::argsort(perm);
    W = W.index_select(1, perm);
    H = H.index_select(0, perm).index_select(1, perm);
  }
  // Upper Cholesky factor of H^-1.
  auto L = torch::linalg_cholesky(H);
  auto Hinv = torch::cholesky_inverse(L);
  auto U = torch::linalg_cholesky(Hinv).transpose(0, 1).contiguous();

  // Grids: static per group of original columns (computed before the sweep)
  // when reordering, so that each group stays contiguous in storage; else
  // per group as the sweep reaches it, from the updated weights, as GPTQ does.
  auto scales = torch::zeros({rows, groups}, W.options());
  auto zeros = torch::zeros({rows, groups}, W.options());
  std::vector<Grid> static_grids;
  if (o.act_order || group == cols) {
    for (std::int64_t g = 0; g < groups; ++g) {
      auto grid =
          find_grid(original_weight.narrow(1, g * group, std::min(group, cols - g * group)), o.bits, o.symmetric);
      static_grids.push_back(grid);
      scales.narrow(1, g, 1).copy_(grid.scale);
      zeros.narrow(1, g, 1).copy_(grid.zero);
    }
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(cols));
  if (o.act_order) {
    auto p = perm.to(torch::kCPU, torch::kInt64).contiguous();
    std::copy(p.data_ptr<std::int64_t>(), p.data_ptr<std::int64_t>() + cols, order.begin());
  } else {
    for (std::int64_t c = 0; c < cols; ++c) order[static_cast<std::size_t>(c)] = c;
  }

  auto Q = torch::zeros_like(W);
  auto codes = torch::zeros_like(W);
  auto pruned = torch::zeros({rows, cols}, W.options().dtype(torch::kBool));
  double loss = 0;
  Grid current;
  for (std::int64_t i1 = 0; i1 < cols; i1 += o.block_size) {
    const std::int64_t count = std::min(o.block_size, cols - i1);
    auto W1 = W.narrow(1, i1, count).clone();
    auto Err1 = torch::zeros_like(W1);
    auto U1 = U.narrow(0, i1, count).narrow(1, i1, count);
    auto diag1 = U1.diagonal();
    auto mask1 = torch::zeros({rows, count}, W.options().dtype(torch::kBool));
    if (o.sparsity.kind == SparsityPattern::Kind::kUnstructured) {
      auto score = W1.pow(2) / diag1.pow(2).unsqueeze(0);
      auto sorted = std::get<0>(score.flatten().sort());
      auto k = static_cast<std::int64_t>(static_cast<double>(score.numel()) * o.sparsity.fraction);
      if (k > 0) mask1 = score <= sorted[k - 1];
    }
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t column = i1 + i, original = order[static_cast<std::size_t>(column)];
      auto w = W1.select(1, i);
      const double d = diag1[i].item<double>();
      if (o.sparsity.kind == SparsityPattern::Kind::kNOfM && i % o.sparsity.m == 0) {
        // Prune the n of the next m weights per row whose removal costs least.
        auto score = W1.narrow(1, i, o.sparsity.m).pow(2) / diag1.narrow(0, i, o.sparsity.m).pow(2).unsqueeze(0);
        auto smallest = std::get<1>(score.topk(o.sparsity.n, 1, /*largest=*/false));
        mask1.narrow(1, i, o.sparsity.m).scatter_(1, smallest, true);
      }
      const Grid* grid;
      if (!static_grids.empty()) {
        grid = &static_grids[static_cast<std::size_t>(original / group)];
      } else {
        if (column % group == 0) {
          // The group's current values: updated in this block, or beyond it.
          const std::int64_t len = std::min(group, cols - column), inside = std::min(len, count - i);
          auto values = inside == len ? W1.narrow(1, i, len)
                                      : torch::cat({W1.narrow(1, i, inside), W.narrow(1, i1 + count, len - inside)}, 1);
          current = find_grid(values, o.bits, o.symmetric);
          scales.narrow(1, column / group, 1).copy_(current.scale);
          zeros.narrow(1, column / group, 1).copy_(current.zero);
        }
        grid = &current;
      }
      auto code = quantize_codes(w, *grid, o.bits);
      auto q = grid->scale.squeeze(1) * (code - grid->zero.squeeze(1));
      auto is_pruned = mask1.select(1, i);
      q = q.masked_fill(is_pruned, 0.0);
      codes.select(1, column).copy_(code.masked_fill(is_pruned, 0.0));
      pruned.select(1, column).copy_(is_pruned);
      Q.select(1, column).copy_(q);
      auto err = (w - q) / d;
      loss += (w - q).pow(2).sum().item<double>() / (2 * d * d);
      W1.narrow(1, i, count - i).sub_(err.unsqueeze(1).matmul(U1.select(0, i).narrow(0, i, count - i).unsqueeze(0)));
      Err1.select(1, i).copy_(err);
    }
    if (i1 + count < cols)
      W.narrow(1, i1 + count, cols - i1 - count)
          .sub_(Err1.matmul(U.narrow(0, i1, count).narrow(1, i1 + count, cols - i1 - count)));
  }
  if (o.act_order) {
    Q = Q.index_select(1, inverse_perm);
    codes = codes.index_select(1, inverse_perm);
    pruned = pruned.index_select(1, inverse_perm);
  }
  CompressedMatrix out;
  out.dequantized = Q;
  out.codes = codes.to(torch::kUInt8);
  out.kept = pruned.logical_not();
  out.scales = scales;
  out.zeros = zeros.to(torch::kUInt8);
  out.loss = loss;
  out.hessian = damped_hessian;
  out.weight = original_weight;
  return out;
}

CompressedMatrix rtn_compress(const torch::Tensor& weight, const CompressionOptions& options) {
  auto identity = torch::eye(weight.size(1), weight.options().dtype(torch::kFloat32));
  auto o = options;
  o.damp = 0;
  o.act_order = false;
  return obs_compress(weight, identity, o);
}

PackedMatrix CompressedMatrix::pack(const CompressionOptions& o) const {
  // The sweep may have run on a GPU; packing reads host memory.
  auto c = codes.to(torch::kCPU).contiguous();
  auto k = kept.to(torch::kCPU, torch::kUInt8).contiguous();
  auto s = scales.to(torch::kCPU, torch::kHalf).contiguous();
  auto z = zeros.to(torch::kCPU).contiguous();
  const auto rows = c.size(0), cols = c.size(1);
  std::vector<std::uint16_t> scale_bits(static_cast<std::size_t>(s.numel()));
  std::memcpy(scale_bits.data(), s.data_ptr(), scale_bits.size() * 2);
  std::vector<std::uint8_t> zero_values(z.data_ptr<std::uint8_t>(), z.data_ptr<std::uint8_t>() + z.numel());
  return pack_matrix(rows, cols, o.bits, o.group_size < 0 ? cols : o.group_size, o.sparsity,
                     {c.data_ptr<std::uint8_t>(), static_cast<std::size_t>(c.numel())},
                     {k.data_ptr<std::uint8_t>(), static_cast<std::size_t>(k.numel())}, std::move(scale_bits),
                     std::move(zero_values));
}

}  // namespace fleet::deltazip
