#include "deltazip/torch/obs_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <torch/torch.h>

#include "common/error.h"
#include "common/half.h"

namespace fleet::deltazip {
namespace {

// Per-row quantization grid with scales rounded to float16, so that stored
// and used grids are identical. Affine: value = scale * (code - zero), codes
// 0..maxq. Sign (1 bit): value = scale * (2 code - 1), the zero point unused.
struct Grid {
  torch::Tensor scale, zero;  // [rows, 1] float32
  double maxq = 0;
  bool sign = false;
  // Non-uniform grid: ascending levels [rows, 2^bits] and the midpoints
  // between neighbours [rows, 2^bits - 1] (undefined for affine grids).
  torch::Tensor levels, midpoints;
};

torch::Tensor half_scale(const torch::Tensor& scale) {
  // Float16 has no smaller step; a zero scale would divide by zero.
  return scale.to(torch::kHalf).to(torch::kFloat32).clamp_min(f16_to_float(1));
}

// GPTQ's min/max grid over each row of `w`, its range shrunk by `shrink`.
Grid minmax_grid(const torch::Tensor& w, double maxq, bool symmetric, double shrink) {
  auto zero_t = torch::zeros({w.size(0)}, w.options());
  auto xmin = torch::minimum(std::get<0>(w.min(1)), zero_t) * shrink;
  auto xmax = torch::maximum(std::get<0>(w.max(1)), zero_t) * shrink;
  if (symmetric) {
    // Centred on the zero point whatever the row's signs. (GPTQ leaves the
    // minimum at 0 for a row without negative values, which puts its
    // largest values past the top code: rare in a row of thousands of
    // weights, common in a low-rank factor's rows of a few.)
    xmax = torch::maximum(xmin.abs(), xmax);
    xmin = -xmax;
  }
  auto flat = (xmin == 0) & (xmax == 0);
  xmin = torch::where(flat, torch::full_like(xmin, -1.0), xmin);
  xmax = torch::where(flat, torch::full_like(xmax, 1.0), xmax);
  auto scale = half_scale((xmax - xmin) / maxq);
  torch::Tensor zero =
      symmetric ? torch::full_like(scale, std::floor((maxq + 1) / 2)) : torch::round(-xmin / scale).clamp(0, maxq);
  return {scale.unsqueeze(1), zero.unsqueeze(1), maxq, false, {}, {}};
}

// Codes of `w` [rows, n] on the grid of each row.
torch::Tensor quantize_codes(const torch::Tensor& w, const Grid& g) {
  if (g.levels.defined()) return torch::searchsorted(g.midpoints, w.contiguous()).to(w.scalar_type());
  if (g.sign) return (w >= 0).to(w.scalar_type());
  return torch::clamp(torch::round(w / g.scale) + g.zero, 0, g.maxq);
}

torch::Tensor dequantize(const torch::Tensor& codes, const Grid& g) {
  if (g.levels.defined()) return torch::gather(g.levels, 1, codes.to(torch::kLong));
  if (g.sign) return g.scale * (2 * codes - 1);
  return g.scale * (codes - g.zero);
}

// Which weights of `w` [rows, len] a magnitude pruning to `sparsity` would
// keep (1) or prune (0): the grid is fitted to the weights it will carry.
torch::Tensor likely_kept(const torch::Tensor& w, const SparsityPattern& sparsity) {
  auto magnitude = w.abs();
  if (sparsity.kind == SparsityPattern::Kind::kNOfM && w.size(1) % sparsity.m == 0) {
    auto groups = magnitude.view({w.size(0), -1, sparsity.m});
    auto smallest = std::get<1>(groups.topk(sparsity.n, 2, /*largest=*/false));
    return torch::ones_like(groups).scatter_(2, smallest, 0.0).view_as(w);
  }
  if (sparsity.kind == SparsityPattern::Kind::kUnstructured) {
    const auto pruned = static_cast<std::int64_t>(static_cast<double>(w.size(1)) * sparsity.fraction);
    if (pruned <= 0) return torch::ones_like(w);
    auto threshold = std::get<0>(magnitude.kthvalue(pruned, 1, /*keepdim=*/true));
    return (magnitude > threshold).to(w.scalar_type());
  }
  return torch::ones_like(w);
}

// 2^bits levels per row of `w` [rows, len] by Lloyd's algorithm on the
// weights it will keep (likely_kept), started evenly over the row's range:
// the levels follow the weights where they are dense and reach the few
// large ones a fine-tune's delta carries, which a uniform grid either
// clips or spends most levels beside.
Grid lloyd_grid(const torch::Tensor& w, const CompressionOptions& o) {
  const std::int64_t k = std::int64_t{1} << o.bits;
  auto kept = likely_kept(w, o.sparsity);
  auto lo = std::get<0>(w.min(1, /*keepdim=*/true)), hi = std::get<0>(w.max(1, /*keepdim=*/true));
  auto levels = lo + (hi - lo) * (torch::arange(k, w.options()) / static_cast<double>(k - 1)).unsqueeze(0);
  auto contiguous = w.contiguous();
  for (int iteration = 0; iteration < 20; ++iteration) {
    auto midpoints = ((levels.narrow(1, 1, k - 1) + levels.narrow(1, 0, k - 1)) / 2).contiguous();
    auto cluster = torch::searchsorted(midpoints, contiguous);
    auto count = torch::zeros_like(levels).scatter_add_(1, cluster, kept);
    auto sum = torch::zeros_like(levels).scatter_add_(1, cluster, kept * w);
    // An empty cluster keeps its level.
    levels = torch::where(count > 0, sum / count.clamp_min(1), levels);
  }
  levels = std::get<0>(levels.to(torch::kHalf).to(torch::kFloat32).sort(1));
  Grid g;
  g.levels = levels;
  g.midpoints = ((levels.narrow(1, 1, k - 1) + levels.narrow(1, 0, k - 1)) / 2).contiguous();
  g.maxq = static_cast<double>(k - 1);
  return g;
}

// The grid of each row of `w` [rows, len] under the options' bits and fit.
Grid find_grid(const torch::Tensor& w, const CompressionOptions& o) {
  if (o.grid == GridFit::kLloyd) return lloyd_grid(w, o);
  if (o.bits == 1) {
    // Sign x scale: the scale that minimises the squared error of the kept
    // weights is their mean magnitude.
    auto kept = likely_kept(w, o.sparsity);
    auto scale = half_scale((w.abs() * kept).sum(1) / kept.sum(1).clamp_min(1));
    return {scale.unsqueeze(1), torch::zeros_like(scale).unsqueeze(1), 1, true, {}, {}};
  }
  const double maxq = o.grid == GridFit::kTernary ? 2 : std::pow(2.0, o.bits) - 1;
  const bool symmetric = o.symmetric || o.grid == GridFit::kTernary;
  if (o.grid == GridFit::kMinMax) return minmax_grid(w, maxq, symmetric, 1.0);
  // Clipping search: the range shrunk in steps of 5 %, per row the one with
  // the least squared error on the weights it will keep. At 2 bits or
  // ternary the extremes are rare and a tighter range fits the bulk.
  auto kept = likely_kept(w, o.sparsity);
  Grid best;
  torch::Tensor best_error;
  for (int step = 0; step < 19; ++step) {
    auto grid = minmax_grid(w, maxq, symmetric, 1.0 - 0.05 * step);
    auto error = ((w - dequantize(quantize_codes(w, grid), grid)).pow(2) * kept).sum(1, /*keepdim=*/true);
    if (step == 0) {
      best = grid;
      best_error = error;
      continue;
    }
    auto better = error < best_error;
    best.scale = torch::where(better, grid.scale, best.scale);
    best.zero = torch::where(better, grid.zero, best.zero);
    best_error = torch::where(better, error, best_error);
  }
  return best;
}

}  // namespace

GridFit parse_grid_fit(const std::string& text) {
  if (text == "minmax") return GridFit::kMinMax;
  if (text == "mse") return GridFit::kMse;
  if (text == "ternary") return GridFit::kTernary;
  if (text == "lloyd") return GridFit::kLloyd;
  throw UsageError("--grid must be minmax, mse, ternary or lloyd, got '" + text + "'");
}

std::string to_string(GridFit fit) {
  switch (fit) {
    case GridFit::kMinMax:
      return "minmax";
    case GridFit::kMse:
      return "mse";
    case GridFit::kTernary:
      return "ternary";
    case GridFit::kLloyd:
      return "lloyd";
  }
  return "minmax";
}

void CompressionOptions::validate() const {
  if (bits != 1 && bits != 2 && bits != 3 && bits != 4 && bits != 8) throw UsageError("--bits must be 1, 2, 3, 4 or 8");
  if (grid == GridFit::kLloyd && bits > 4) throw UsageError("--grid lloyd takes 1 to 4 bits (a codebook per group)");
  if (grid == GridFit::kLloyd && !symmetric) throw UsageError("--asym does not apply to --grid lloyd");
  if (bits == 1 && !symmetric) throw UsageError("--bits 1 is the sign grid (+-scale): --asym does not apply");
  if (bits == 1 && grid == GridFit::kTernary) throw UsageError("--grid ternary stores 2-bit codes: use --bits 2");
  if (grid == GridFit::kTernary && (bits != 2 || !symmetric))
    throw UsageError("--grid ternary (levels -s, 0, +s) stores 2-bit symmetric codes: use --bits 2 without --asym");
  if (group_size == 0 || group_size < -1) throw UsageError("--group-size must be -1 (per row) or positive");
  if (block_size <= 0) throw UsageError("--block-size must be positive");
  if (!(damp >= 0)) throw UsageError("--damp must be >= 0");
  if (sparsity.kind == SparsityPattern::Kind::kNOfM && block_size % sparsity.m != 0)
    throw UsageError("--block-size must be a multiple of the n:m group (" + std::to_string(sparsity.m) + ")");
  if (rank < 0 || !(rank_bits >= 0)) throw UsageError("--rank must be 0 (full rank) or positive");
  if (low_rank() && bits < 2) throw UsageError("--rank stores its two factors at 2 to 8 bits: use --bits 2 or more");
  if (low_rank() && (sparsity.kind != SparsityPattern::Kind::kDense || grid != GridFit::kMinMax || group_size != -1))
    throw UsageError(
        "--rank stores two dense factors with one scale per row: it takes no --sparsity, --grid or --group-size");
}

std::int64_t CompressionOptions::rank_for(std::int64_t rows, std::int64_t cols) const {
  const std::int64_t side = std::min(rows, cols);
  const double wanted = rank > 0 ? static_cast<double>(rank)
                                 : rank_bits * static_cast<double>(rows) * static_cast<double>(cols) /
                                       (bits * static_cast<double>(rows + cols));
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(wanted), 1, side);
}

namespace {

// The grids a sweep chooses, per row and group of original columns: scales
// and zero points, or codebooks for the non-uniform fit.
struct GridTable {
  torch::Tensor scales, zeros, codebook;

  GridTable(std::int64_t rows, std::int64_t groups, const CompressionOptions& o, const torch::TensorOptions& options)
      : scales(torch::zeros({rows, groups}, options)), zeros(torch::zeros({rows, groups}, options)) {
    if (o.grid == GridFit::kLloyd) codebook = torch::zeros({rows, groups, std::int64_t{1} << o.bits}, options);
  }
  void store(std::int64_t group, const Grid& grid) {
    if (codebook.defined()) {
      codebook.select(1, group).copy_(grid.levels);
      return;
    }
    scales.narrow(1, group, 1).copy_(grid.scale);
    zeros.narrow(1, group, 1).copy_(grid.zero);
  }
};

// One OBS sweep over the columns of a matrix: set up (dead inputs, damping,
// column order, the Cholesky factor of H^-1), then block by block each
// column pruned, quantized, and its error spread over the columns after it.
class ObsSweep {
 public:
  ObsSweep(const torch::Tensor& weight, const torch::Tensor& hessian, const CompressionOptions& o)
      : o_(o),
        W_(weight.to(torch::kFloat32).clone()),
        rows_(W_.size(0)),
        cols_(W_.size(1)),
        group_(o.group_size < 0 ? cols_ : o.group_size),
        grids_(rows_, (cols_ + group_ - 1) / group_, o, W_.options()) {
    auto H = hessian.to(torch::kFloat32).clone();
    if (H.dim() != 2 || H.size(0) != cols_ || H.size(1) != cols_)
      throw InputError("the Hessian must be [" + std::to_string(cols_) + ", " + std::to_string(cols_) + "]");
    if (o.sparsity.kind == SparsityPattern::Kind::kNOfM && cols_ % o.sparsity.m != 0)
      throw InputError("n:m sparsity needs the input dimension (" + std::to_string(cols_) + ") to be a multiple of " +
                       std::to_string(o.sparsity.m));
    // Inputs that never fire carry no information: their weights go to zero.
    auto dead = H.diagonal() == 0;
    H.diagonal().masked_fill_(dead, 1.0);
    W_.index_put_({torch::indexing::Slice(), dead}, 0.0);
    // Damping keeps the inverse well conditioned.
    H.diagonal().add_(o.damp * H.diagonal().mean().item<double>());
    damped_hessian_ = H.clone();
    original_weight_ = W_.clone();
    order_.resize(static_cast<std::size_t>(cols_));
    for (std::int64_t c = 0; c < cols_; ++c) order_[static_cast<std::size_t>(c)] = c;
    if (o.act_order) reorder(H);
    // Upper Cholesky factor of H^-1.
    auto L = torch::linalg_cholesky(H);
    U_ = torch::linalg_cholesky(torch::cholesky_inverse(L)).transpose(0, 1).contiguous();
    // Grids: static per group of original columns (computed before the
    // sweep) when reordering, so that each group stays contiguous in
    // storage; else per group as the sweep reaches it, from the updated
    // weights, as GPTQ does.
    if (o.act_order || group_ == cols_) {
      for (std::int64_t g = 0; g * group_ < cols_; ++g) {
        static_grids_.push_back(
            find_grid(original_weight_.narrow(1, g * group_, std::min(group_, cols_ - g * group_)), o));
        grids_.store(g, static_grids_.back());
      }
    }
    Q_ = torch::zeros_like(W_);
    codes_ = torch::zeros_like(W_);
    pruned_ = torch::zeros({rows_, cols_}, W_.options().dtype(torch::kBool));
  }

  CompressedMatrix run() {
    for (std::int64_t first = 0; first < cols_; first += o_.block_size) sweep_block(first);
    if (o_.act_order) {
      Q_ = Q_.index_select(1, inverse_perm_);
      codes_ = codes_.index_select(1, inverse_perm_);
      pruned_ = pruned_.index_select(1, inverse_perm_);
    }
    CompressedMatrix out;
    out.dequantized = Q_;
    out.codes = codes_.to(torch::kUInt8);
    out.kept = pruned_.logical_not();
    out.scales = grids_.scales;
    out.zeros = grids_.zeros.to(torch::kUInt8);
    out.codebook = grids_.codebook;
    out.loss = loss_;
    out.hessian = damped_hessian_;
    out.weight = original_weight_;
    return out;
  }

 private:
  // Columns by descending Hessian diagonal (whole n:m groups by their
  // summed diagonal, so that every group of m stays m consecutive columns).
  void reorder(torch::Tensor& H) {
    torch::Tensor perm;
    if (o_.sparsity.kind == SparsityPattern::Kind::kNOfM) {
      const std::int64_t m = o_.sparsity.m;
      auto group_order = torch::argsort(H.diagonal().view({cols_ / m, m}).sum(1), 0, /*descending=*/true);
      perm = (group_order.unsqueeze(1) * m + torch::arange(m, group_order.options()).unsqueeze(0)).flatten();
    } else {
      perm = torch::argsort(H.diagonal(), 0, /*descending=*/true);
    }
    inverse_perm_ = torch::argsort(perm);
    W_ = W_.index_select(1, perm);
    H = H.index_select(0, perm).index_select(1, perm);
    auto p = perm.to(torch::kCPU, torch::kInt64).contiguous();
    std::copy(p.data_ptr<std::int64_t>(), p.data_ptr<std::int64_t>() + cols_, order_.begin());
  }

  // The grid for sweep column `column` (the i-th of the block in W1).
  const Grid& grid_for(std::int64_t column, std::int64_t i, const torch::Tensor& W1, std::int64_t first,
                       std::int64_t count) {
    if (!static_grids_.empty())
      return static_grids_[static_cast<std::size_t>(order_[static_cast<std::size_t>(column)] / group_)];
    if (column % group_ == 0) {
      // The group's current values: updated in this block, or beyond it.
      const std::int64_t len = std::min(group_, cols_ - column), inside = std::min(len, count - i);
      auto values = inside == len ? W1.narrow(1, i, len)
                                  : torch::cat({W1.narrow(1, i, inside), W_.narrow(1, first + count, len - inside)}, 1);
      current_ = find_grid(values, o_);
      grids_.store(column / group_, current_);
    }
    return current_;
  }

  void sweep_block(std::int64_t first) {
    const std::int64_t count = std::min(o_.block_size, cols_ - first);
    auto W1 = W_.narrow(1, first, count).clone();
    auto Err1 = torch::zeros_like(W1);
    auto U1 = U_.narrow(0, first, count).narrow(1, first, count);
    auto diag1 = U1.diagonal();
    auto mask1 = torch::zeros({rows_, count}, W_.options().dtype(torch::kBool));
    if (o_.sparsity.kind == SparsityPattern::Kind::kUnstructured) {
      auto score = W1.pow(2) / diag1.pow(2).unsqueeze(0);
      auto sorted = std::get<0>(score.flatten().sort());
      auto k = static_cast<std::int64_t>(static_cast<double>(score.numel()) * o_.sparsity.fraction);
      if (k > 0) mask1 = score <= sorted[k - 1];
    }
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t column = first + i;
      auto w = W1.select(1, i);
      const double d = diag1[i].item<double>();
      if (o_.sparsity.kind == SparsityPattern::Kind::kNOfM && i % o_.sparsity.m == 0) {
        // Prune the n of the next m weights per row whose removal costs least.
        auto score = W1.narrow(1, i, o_.sparsity.m).pow(2) / diag1.narrow(0, i, o_.sparsity.m).pow(2).unsqueeze(0);
        auto smallest = std::get<1>(score.topk(o_.sparsity.n, 1, /*largest=*/false));
        mask1.narrow(1, i, o_.sparsity.m).scatter_(1, smallest, true);
      }
      const Grid& grid = grid_for(column, i, W1, first, count);
      auto code = quantize_codes(w.unsqueeze(1), grid).squeeze(1);
      auto q = dequantize(code.unsqueeze(1), grid).squeeze(1);
      auto is_pruned = mask1.select(1, i);
      q = q.masked_fill(is_pruned, 0.0);
      codes_.select(1, column).copy_(code.masked_fill(is_pruned, 0.0));
      pruned_.select(1, column).copy_(is_pruned);
      Q_.select(1, column).copy_(q);
      auto err = (w - q) / d;
      loss_ += (w - q).pow(2).sum().item<double>() / (2 * d * d);
      W1.narrow(1, i, count - i).sub_(err.unsqueeze(1).matmul(U1.select(0, i).narrow(0, i, count - i).unsqueeze(0)));
      Err1.select(1, i).copy_(err);
    }
    if (first + count < cols_)
      W_.narrow(1, first + count, cols_ - first - count)
          .sub_(Err1.matmul(U_.narrow(0, first, count).narrow(1, first + count, cols_ - first - count)));
  }

  const CompressionOptions& o_;
  torch::Tensor W_;
  std::int64_t rows_, cols_, group_;
  GridTable grids_;
  torch::Tensor U_, inverse_perm_, damped_hessian_, original_weight_, Q_, codes_, pruned_;
  std::vector<std::int64_t> order_;  ///< original column of each sweep position
  std::vector<Grid> static_grids_;
  Grid current_;
  double loss_ = 0;
};

}  // namespace

CompressedMatrix obs_compress(const torch::Tensor& weight, const torch::Tensor& hessian, const CompressionOptions& o) {
  o.validate();
  torch::NoGradGuard no_grad;
  return ObsSweep(weight, hessian, o).run();
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
  const auto rows = c.size(0), cols = c.size(1);
  auto half_bits = [](const torch::Tensor& t) {
    auto h = t.to(torch::kCPU, torch::kHalf).contiguous();
    std::vector<std::uint16_t> out(static_cast<std::size_t>(h.numel()));
    std::memcpy(out.data(), h.data_ptr(), out.size() * 2);
    return out;
  };
  std::vector<std::uint16_t> scale_bits, levels;
  std::vector<std::uint8_t> zero_values;
  if (codebook.defined()) {
    levels = half_bits(codebook);
  } else {
    scale_bits = half_bits(scales);
    auto z = zeros.to(torch::kCPU).contiguous();
    zero_values.assign(z.data_ptr<std::uint8_t>(), z.data_ptr<std::uint8_t>() + z.numel());
  }
  return pack_matrix(rows, cols, o.bits, o.group_size < 0 ? cols : o.group_size, o.sparsity,
                     {c.data_ptr<std::uint8_t>(), static_cast<std::size_t>(c.numel())},
                     {k.data_ptr<std::uint8_t>(), static_cast<std::size_t>(k.numel())}, std::move(scale_bits),
                     std::move(zero_values), std::move(levels));
}

}  // namespace fleet::deltazip
