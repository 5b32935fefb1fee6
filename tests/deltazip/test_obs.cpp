// The OBS sweep's checkable identities: loss = Hessian-weighted
// error / 2, diagonal Hessian = round-to-nearest, n:m zeros, pruned = 0,
// better than round-to-nearest on correlated Hessians; storage round trip.
#include <cmath>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/error.h"
#include "deltazip/torch/obs_compressor.h"

namespace fleet::deltazip {
namespace {

torch::Tensor random_weight(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn({rows, cols}, gen, torch::kFloat32) * 0.02;
}

// 2/n X^T X of inputs with strongly correlated features.
torch::Tensor correlated_hessian(std::int64_t cols, std::uint64_t seed, std::int64_t samples = 512) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto mix = torch::randn({cols, cols}, gen, torch::kFloat32) / std::sqrt(static_cast<double>(cols));
  auto scale = torch::rand({cols}, gen, torch::kFloat32) * 3 + 0.1;
  auto x = torch::randn({samples, cols}, gen, torch::kFloat32).matmul(mix + torch::eye(cols)) * scale;
  return 2.0 / samples * x.t().matmul(x);
}

double weighted_error(const CompressedMatrix& c) {
  auto e = (c.weight - c.dequantized).to(torch::kFloat64);
  return torch::trace(e.matmul(c.hessian.to(torch::kFloat64)).matmul(e.t())).item<double>();
}

CompressionOptions options(int bits, const char* sparsity, std::int64_t group = -1, bool act_order = false) {
  CompressionOptions o;
  o.bits = bits;
  o.sparsity = SparsityPattern::parse(sparsity);
  o.group_size = group;
  o.act_order = act_order;
  o.block_size = 16;  // several blocks on small matrices
  return o;
}

TEST(Obs, LossEqualsHalfTheHessianWeightedError) {
  auto w = random_weight(24, 64, 1);
  auto h = correlated_hessian(64, 2);
  for (const char* sparsity : {"none", "2:4", "0.5"}) {
    for (bool act_order : {false, true}) {
      auto c = obs_compress(w, h, options(3, sparsity, -1, act_order));
      EXPECT_NEAR(weighted_error(c), 2 * c.loss, 1e-4 * weighted_error(c)) << sparsity << " act_order " << act_order;
    }
  }
}

TEST(Obs, DiagonalHessianIsRoundToNearest) {
  auto w = random_weight(16, 48, 3);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  auto h = torch::diag(torch::rand({48}, gen, torch::kFloat32) + 0.5);
  for (std::int64_t group : {-1, 16}) {
    auto o = options(4, "none", group);
    auto obs = obs_compress(w, h, o);
    auto rtn = rtn_compress(w, o);
    EXPECT_TRUE(torch::equal(obs.dequantized, rtn.dequantized)) << "group " << group;
    EXPECT_TRUE(torch::equal(obs.codes, rtn.codes));
  }
  // Pruning scores w^2 / U_cc^2 rank like magnitudes when the diagonal is constant.
  auto o = options(4, "2:4");
  EXPECT_TRUE(torch::equal(obs_compress(w, torch::eye(48) * 2.5, o).dequantized, rtn_compress(w, o).dequantized));
}

TEST(Obs, NOfMKeepsTheRightZerosAndPrunedWeightsAreZero) {
  auto w = random_weight(20, 64, 5);
  auto h = correlated_hessian(64, 6);
  for (const char* sparsity : {"2:4", "4:8"}) {
    auto o = options(2, sparsity, 16);
    auto c = obs_compress(w, h, o);
    const int m = o.sparsity.m;
    auto zeros_per_group = (c.dequantized == 0).view({20, 64 / m, m}).sum(-1);
    EXPECT_GE(zeros_per_group.min().item<std::int64_t>(), o.sparsity.n) << sparsity;
    auto kept_per_group = c.kept.view({20, 64 / m, m}).sum(-1);
    EXPECT_TRUE((kept_per_group == m - o.sparsity.n).all().item<bool>()) << sparsity;
    EXPECT_TRUE((c.dequantized.masked_select(c.kept.logical_not()) == 0).all().item<bool>());
  }
  auto c = obs_compress(w, h, options(4, "0.7"));
  double pruned = c.kept.logical_not().sum().item<double>() / static_cast<double>(c.kept.numel());
  EXPECT_NEAR(pruned, 0.7, 0.02);
}

TEST(Obs, BeatsRoundToNearestOnCorrelatedHessians) {
  for (std::uint64_t seed = 10; seed < 14; ++seed) {
    auto w = random_weight(32, 64, seed);
    auto h = correlated_hessian(64, seed + 100);
    for (const char* sparsity : {"none", "2:4"}) {
      for (int bits : {2, 4}) {
        for (bool act_order : {false, true}) {
          auto o = options(bits, sparsity, -1, act_order);
          auto obs = obs_compress(w, h, o);
          auto rtn = rtn_compress(w, o);
          rtn.hessian = obs.hessian;  // judge both with the same (damped) Hessian
          rtn.weight = obs.weight;
          EXPECT_LT(weighted_error(obs), weighted_error(rtn))
              << "seed " << seed << ", " << sparsity << ", " << bits << " bits, act_order " << act_order;
        }
      }
    }
  }
}

TEST(Obs, DeadInputsZeroTheirColumn) {
  auto w = random_weight(8, 16, 7);
  auto h = correlated_hessian(16, 8);
  h.select(0, 3).zero_();
  h.select(1, 3).zero_();
  auto c = obs_compress(w, h, options(4, "none"));
  EXPECT_TRUE((c.dequantized.select(1, 3) == 0).all().item<bool>());
}

TEST(Obs, PackedFormReconstructsExactly) {
  auto w = random_weight(12, 32, 9);
  auto h = correlated_hessian(32, 10);
  for (const char* sparsity : {"none", "2:4", "0.5"})
    for (int bits : {2, 3, 4, 8})
      for (bool act_order : {false, true}) {
        auto o = options(bits, sparsity, 8, act_order);
        o.symmetric = bits != 3;  // the asymmetric grid too
        auto c = obs_compress(w, h, o);
        auto packed = c.pack(o);
        std::vector<float> out(static_cast<std::size_t>(c.dequantized.numel()));
        unpack_matrix(packed, out);
        auto restored = torch::from_blob(out.data(), {12, 32}, torch::kFloat32);
        EXPECT_TRUE(torch::equal(restored, c.dequantized)) << sparsity << " " << bits << " act_order " << act_order;
      }
}

// A row of one sign on the symmetric grid: its largest value is a level
// (GPTQ's grid, which keeps the minimum at 0 for such a row, clamps the
// upper half of the range to about half of it).
TEST(Obs, SymmetricGridCoversARowOfOneSign) {
  auto w = random_weight(6, 8, 13).abs();  // all positive...
  w.narrow(0, 3, 3).neg_();                // ...and all negative
  for (int bits : {2, 4, 8}) {
    const auto c = rtn_compress(w, options(bits, "none"));
    const auto step = c.scales;  // [rows, 1]
    const float worst = ((c.dequantized - w).abs() / step).max().item<float>();
    // Half a step, and the float16 rounding of the step (2^-11 of it) at the top level.
    EXPECT_LE(worst, 0.5 + std::ldexp(1.0, bits - 1 - 11) + 1e-4) << bits << " bits: an error of " << worst << " steps";
  }
}

CompressionOptions grid_options(int bits, GridFit fit, const char* sparsity, std::int64_t group, bool act_order) {
  auto o = options(bits, sparsity, group, act_order);
  o.grid = fit;
  return o;
}

// Every grid (sign at 1 bit, clipped, ternary, Lloyd codebooks) through the
// sweep: the OBS loss identity holds, the packed form decodes to exactly
// what the sweep used, and the levels are what the grid promises.
TEST(Obs, EveryGridPacksAndKeepsTheLossIdentity) {
  auto w = random_weight(12, 32, 11);
  auto h = correlated_hessian(32, 12);
  struct Form {
    int bits;
    GridFit fit;
  };
  for (const Form f : {Form{1, GridFit::kMinMax}, Form{2, GridFit::kMse}, Form{2, GridFit::kTernary},
                       Form{1, GridFit::kLloyd}, Form{2, GridFit::kLloyd}, Form{3, GridFit::kLloyd}})
    for (const char* sparsity : {"none", "2:4", "0.5"})
      for (std::int64_t group : {-1, 8})
        for (bool act_order : {false, true}) {
          const auto o = grid_options(f.bits, f.fit, sparsity, group, act_order);
          const std::string label = std::to_string(f.bits) + "-bit " + to_string(f.fit) + " " + sparsity + " group " +
                                    std::to_string(group) + (act_order ? " act-order" : "");
          auto c = obs_compress(w, h, o);
          EXPECT_NEAR(weighted_error(c), 2 * c.loss, 1e-4 * weighted_error(c)) << label;
          auto packed = c.pack(o);
          EXPECT_EQ(packed.has_codebook(), f.fit == GridFit::kLloyd) << label;
          std::vector<float> out(static_cast<std::size_t>(c.dequantized.numel()));
          unpack_matrix(packed, out);
          auto restored = torch::from_blob(out.data(), {12, 32}, torch::kFloat32);
          ASSERT_TRUE(torch::equal(restored, c.dequantized)) << label;
          // Kept weights take at most 2^bits values per row and group (ternary: 3).
          const std::int64_t levels = f.fit == GridFit::kTernary ? 3 : std::int64_t{1} << f.bits;
          const std::int64_t width = group < 0 ? 32 : group;
          for (std::int64_t r = 0; r < 12; ++r)
            for (std::int64_t g = 0; g < 32 / width; ++g) {
              auto values = c.dequantized[r].narrow(0, g * width, width);
              auto kept = c.kept[r].narrow(0, g * width, width);
              EXPECT_LE(std::get<0>(torch::_unique(values.masked_select(kept))).numel(), levels) << label;
            }
          if (f.fit == GridFit::kTernary) {
            EXPECT_LE(c.codes.max().item<int>(), 2) << label;
          }
        }
}

// Each fit lowers the error it is fitted to: on round-to-nearest of
// Gaussian rows, the clipped range never does worse than the full range (the
// full range is one of its candidates) and Lloyd's 2-bit levels do much
// better than the uniform grid (Lloyd-Max: 0.12 sigma^2 against ~0.19); the
// 1-bit scale is each row's mean magnitude.
TEST(Obs, GridFitsLowerTheirOwnError) {
  auto w = random_weight(64, 256, 13);
  auto error = [&](GridFit fit, int bits) {
    auto o = grid_options(bits, fit, "none", -1, false);
    return (rtn_compress(w, o).dequantized - w).pow(2).sum(1);
  };
  const auto minmax = error(GridFit::kMinMax, 2);
  EXPECT_TRUE((error(GridFit::kMse, 2) <= minmax).all().item<bool>());
  EXPECT_LT(error(GridFit::kLloyd, 2).sum().item<double>(), 0.8 * minmax.sum().item<double>());
  auto sign = rtn_compress(w, grid_options(1, GridFit::kMinMax, "none", -1, false));
  auto mean_magnitude = w.abs().mean(1).to(torch::kHalf).to(torch::kFloat32);
  EXPECT_TRUE(torch::equal(sign.dequantized.abs(), mean_magnitude.unsqueeze(1).expand_as(w)));
  EXPECT_TRUE(torch::equal(sign.dequantized > 0, w >= 0));
}

TEST(Obs, BadOptionsAndShapesAreRejected) {
  auto w = random_weight(4, 10, 1);
  EXPECT_THROW(obs_compress(w, torch::eye(10), options(5, "none")), UsageError);
  auto sign_asym = options(1, "none");
  sign_asym.symmetric = false;
  EXPECT_THROW(obs_compress(w, torch::eye(10), sign_asym), UsageError);
  EXPECT_THROW(obs_compress(w, torch::eye(10), grid_options(3, GridFit::kTernary, "none", -1, false)), UsageError);
  EXPECT_THROW(obs_compress(w, torch::eye(10), grid_options(8, GridFit::kLloyd, "none", -1, false)), UsageError);
  EXPECT_THROW(parse_grid_fit("uniform"), UsageError);
  EXPECT_THROW(obs_compress(w, torch::eye(10), options(4, "2:4")), InputError);  // 10 columns
  EXPECT_THROW(obs_compress(w, torch::eye(9), options(4, "none")), InputError);
}

}  // namespace
}  // namespace fleet::deltazip
