#include "deltazip/obs_compressor.h"

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
    xmax = torch::maximum(xmin.abs(), xmax);
    xmin = torch::where(xmin < 0, -xmax, xmin);
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
  torch::Tensor codebook;
  if (o.grid == GridFit::kLloyd) codebook = torch::zeros({rows, groups, std::int64_t{1} << o.bits}, W.options());
  auto store_grid = [&](std::int64_t g, const Grid& grid) {
    if (codebook.defined()) {
      codebook.select(1, g).copy_(grid.levels);
      return;
    }
    scales.narrow(1, g, 1).copy_(grid.scale);
    zeros.narrow(1, g, 1).copy_(grid.zero);
  };
  std::vector<Grid> static_grids;
  if (o.act_order || group == cols) {
    for (std::int64_t g = 0; g < groups; ++g) {
      auto grid = find_grid(original_weight.narrow(1, g * group, std::min(group, cols - g * group)), o);
      static_grids.push_back(grid);
      store_grid(g, grid);
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
          current = find_grid(values, o);
          store_grid(column / group, current);
        }
        grid = &current;
      }
      auto code = quantize_codes(w.unsqueeze(1), *grid).squeeze(1);
      auto q = dequantize(code.unsqueeze(1), *grid).squeeze(1);
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
  out.codebook = codebook;
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
