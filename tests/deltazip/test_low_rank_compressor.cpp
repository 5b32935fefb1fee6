// The low-rank form's checkable properties: a delta of rank r comes back
// from r factors up to the factors' rounding; with the Hessian it finds the
// directions that matter for the layer's output (less output error than the
// plain SVD at the same rank); the refit and the factors' OBS sweeps do not
// lose to rounding the factors alone; the stored factors decode to exactly
// what the compressor says reconstruction yields; below one bit per weight
// it beats 1-bit sign x scale on a delta whose change lies in few directions.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/error.h"
#include "deltazip/low_rank.h"
#include "deltazip/torch/delta_compressor.h"
#include "deltazip/torch/low_rank_compressor.h"

namespace fleet::deltazip {
namespace {

torch::Tensor randn(std::vector<std::int64_t> shape, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, gen, torch::kFloat32);
}

// 2/n XᵀX of inputs whose features differ in scale by up to 30x and correlate.
torch::Tensor uneven_hessian(std::int64_t cols, std::uint64_t seed) {
  auto x = randn({512, cols}, seed)
               .matmul(torch::eye(cols) + 0.3 * randn({cols, cols}, seed + 1) / std::sqrt(static_cast<double>(cols)));
  x = x * torch::logspace(0, 1.5, cols);
  return 2.0 / 512 * x.t().matmul(x);
}

double output_error(const torch::Tensor& delta, const torch::Tensor& q, const torch::Tensor& h) {
  auto e = (delta - q).to(torch::kFloat64);
  return torch::trace(e.matmul(h.to(torch::kFloat64)).matmul(e.t())).item<double>();
}

CompressionOptions low_rank(std::int64_t rank, int bits) {
  CompressionOptions o;
  o.bits = bits;
  o.rank = rank;
  o.block_size = 16;
  return o;
}

TEST(LowRank, ADeltaOfRankRComesBackFromRFactors) {
  const auto delta = randn({40, 6}, 1).matmul(randn({6, 56}, 2)) * 0.01;
  const auto h = uneven_hessian(56, 3);
  const auto c = low_rank_compress(delta, h, low_rank(6, 8));
  EXPECT_EQ(c.up.dequantized.sizes(), (std::vector<std::int64_t>{40, 6}));
  EXPECT_EQ(c.down.dequantized.sizes(), (std::vector<std::int64_t>{6, 56}));
  // 8-bit factors: the relative output error is of the order of their rounding, 2^-8.
  EXPECT_LT(output_error(delta, c.dequantized, h) / output_error(delta, torch::zeros_like(delta), h), 1e-4);
}

TEST(LowRank, TheHessianPicksTheDirectionsThatMatterForTheOutput) {
  const auto delta = randn({48, 64}, 4) * 0.01;  // full rank: a rank-8 form must choose
  const auto h = uneven_hessian(64, 5);
  const auto weighted = low_rank_compress(delta, h, low_rank(8, 8));
  const auto plain = low_rank_compress(delta, torch::eye(64), low_rank(8, 8));
  EXPECT_LT(output_error(delta, weighted.dequantized, h), 0.8 * output_error(delta, plain.dequantized, h));
  // And the plain one is the better in the plain metric: each is optimal in its own.
  EXPECT_LT(output_error(delta, plain.dequantized, torch::eye(64)),
            output_error(delta, weighted.dequantized, torch::eye(64)));
}

// Wide and tall deltas take different routes to their directions (the
// eigenvectors of D H Dᵀ, or of Sᵀ Dᵀ D S and a triangular solve): both reach
// the least output error any rank-r matrix has, the discarded singular
// values of D S, here computed by an SVD (8-bit factors add their rounding).
TEST(LowRank, BothShapesReachTheLeastOutputErrorOfTheirRank) {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{24, 64}, {64, 24}}) {
    const auto delta = randn({rows, cols}, 12) * 0.01;
    const auto h = uneven_hessian(cols, 13);
    auto o = low_rank(5, 8);
    const auto c = low_rank_compress(delta, h, o);
    auto damped = h.to(torch::kFloat64).clone();
    damped.diagonal().add_(o.damp * damped.diagonal().mean().item<double>());
    const auto sigma = torch::linalg_svdvals(delta.to(torch::kFloat64).matmul(torch::linalg_cholesky(damped)));
    const double least = sigma.narrow(0, 5, sigma.size(0) - 5).pow(2).sum().item<double>();
    const double got = output_error(delta, c.dequantized, damped);
    EXPECT_LT(got, 1.01 * least) << rows << " x " << cols;
    EXPECT_GT(got, 0.999 * least) << rows << " x " << cols;  // no rank-5 matrix does better
  }
}

TEST(LowRank, StoredFactorsDecodeToWhatReconstructionYields) {
  const auto delta = randn({32, 48}, 6) * 0.02;
  const auto h = uneven_hessian(48, 7);
  for (int bits : {2, 4, 8}) {
    const auto o = low_rank(5, bits);
    const auto c = low_rank_compress(delta, h, o);
    const LowRankMatrix packed = c.pack(o);
    packed.validate("test");
    EXPECT_EQ(packed.rank(), 5);
    EXPECT_EQ(packed.up.bits, bits);
    std::vector<float> decoded(32 * 48);
    unpack_low_rank(packed, decoded);
    const auto got = torch::from_blob(decoded.data(), {32, 48}, torch::kFloat32);
    EXPECT_TRUE(torch::allclose(got, c.dequantized, 1e-6, 1e-7)) << bits << " bits";
    // Each factor alone decodes exactly (the product differs only by summation order).
    std::vector<float> up(32 * 5);
    unpack_matrix(packed.up, up);
    EXPECT_TRUE(torch::equal(torch::from_blob(up.data(), {32, 5}, torch::kFloat32), c.up.dequantized));
  }
}

TEST(LowRank, BelowOneBitItBeatsSignTimesScaleOnADeltaAlongFewDirections) {
  // Eight strong directions and a little noise, as a fine-tune's delta.
  const auto delta = (randn({128, 8}, 8).matmul(randn({8, 256}, 9)) + 0.2 * randn({128, 256}, 10)) * 0.01;
  const auto h = uneven_hessian(256, 11);
  const auto lr = low_rank_compress(delta, h, low_rank(12, 4));
  CompressionOptions sign;
  sign.bits = 1;
  sign.sparsity = SparsityPattern::parse("none");
  sign.block_size = 16;
  const auto one_bit = obs_compress(delta, h, sign);
  EXPECT_LT(lr.pack(low_rank(12, 4)).bits_per_weight(), one_bit.pack(sign).bits_per_weight());
  EXPECT_LT(output_error(delta, lr.dequantized, h), 0.5 * output_error(delta, one_bit.dequantized, h));
}

TEST(LowRank, RankFollowsTheBitsPerWeightAndStaysWithinTheShape) {
  CompressionOptions o;
  o.bits = 4;
  o.rank_bits = 1.0;
  // 1 bit per weight of a 384 x 1024 delta at 4 bits per factor code: 384·1024 / (4·1408) = 69.8.
  EXPECT_EQ(o.rank_for(384, 1024), 69);
  EXPECT_EQ(o.rank_for(2, 3), 1);
  o.rank_bits = 0;
  o.rank = 500;
  EXPECT_EQ(o.rank_for(384, 1024), 384);
}

TEST(LowRank, OptionsThatDoNotApplyToFactorsAreRefused) {
  auto o = low_rank(4, 4);
  o.sparsity = SparsityPattern::parse("2:4");
  EXPECT_THROW(o.validate(), UsageError);
  o = low_rank(4, 1);
  EXPECT_THROW(o.validate(), UsageError);
  o = low_rank(4, 4);
  o.grid = GridFit::kLloyd;
  EXPECT_THROW(o.validate(), UsageError);
  o = low_rank(-1, 4);
  EXPECT_THROW(o.validate(), UsageError);
  EXPECT_THROW(low_rank_compress(randn({4, 8}, 1), torch::eye(6), low_rank(2, 4)), InputError);
}

// A fixed rank beside a size budget: the budget chooses each layer's form,
// so the pair is refused before any file is read (the paths do not exist).
TEST(LowRank, ARankBesideASizeBudgetIsRefused) {
  CompressCommand c;
  c.base = "no-such-base";
  c.target = "no-such-target";
  c.output = "out.h5";
  c.sparsity = "none";
  c.rank = 4;
  c.target_ratio = 8;
  EXPECT_THROW(compress_delta(c), UsageError);
  c.target_ratio = 0;
  c.max_bytes = 100000;
  EXPECT_THROW(compress_delta(c), UsageError);
}

}  // namespace
}  // namespace fleet::deltazip
