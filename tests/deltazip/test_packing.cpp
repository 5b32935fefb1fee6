// Packing of codes, n:m positions and masks; bits-per-weight arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/half.h"
#include "deltazip/packing.h"
#include "deltazip/size_budget.h"

namespace fleet::deltazip {
namespace {

TEST(PackBits, RoundTripsEveryWidth) {
  std::mt19937 rng(1);
  for (int bits = 1; bits <= 8; ++bits) {
    std::vector<std::uint8_t> codes(1001);
    for (auto& c : codes) c = static_cast<std::uint8_t>(rng() % (1u << bits));
    auto packed = pack_bits(codes, bits);
    EXPECT_EQ(packed.size(), (codes.size() * static_cast<std::size_t>(bits) + 7) / 8);
    EXPECT_EQ(unpack_bits(packed, bits, codes.size()), codes) << bits << " bits";
  }
  EXPECT_EQ(pack_bits(std::vector<std::uint8_t>{1, 2, 3, 0}, 2), std::vector<std::uint8_t>{0b00111001});
  EXPECT_THROW(unpack_bits(std::vector<std::uint8_t>{0}, 4, 3), InputError);
}

TEST(SparsityPattern, ParsesAndNames) {
  EXPECT_EQ(SparsityPattern::parse("none").kind, SparsityPattern::Kind::kDense);
  auto p = SparsityPattern::parse("2:4");
  EXPECT_EQ(p.kind, SparsityPattern::Kind::kNOfM);
  EXPECT_EQ(p.kept_per_group(), 2);
  EXPECT_EQ(SparsityPattern::parse("4:8").to_string(), "4:8");
  EXPECT_EQ(SparsityPattern::parse("0.75").to_string(), "0.75");
  for (const char* bad : {"4:2", "2:", "1.5", "half", "0:4"})
    EXPECT_THROW(SparsityPattern::parse(bad), UsageError) << bad;
}

// A random quantized matrix in the given pattern, packed and unpacked.
void check_round_trip(const std::string& sparsity, int bits, std::int64_t group) {
  const std::int64_t rows = 6, cols = 16;
  auto pattern = SparsityPattern::parse(sparsity);
  std::mt19937 rng(static_cast<unsigned>(bits * 100 + group));
  std::vector<std::uint8_t> codes(rows * cols), kept(rows * cols, 1);
  for (auto& c : codes) c = static_cast<std::uint8_t>(rng() % (1u << bits));
  if (pattern.kind == SparsityPattern::Kind::kNOfM) {
    for (std::int64_t g = 0; g < rows * cols; g += pattern.m) {
      std::vector<int> idx(static_cast<std::size_t>(pattern.m));
      std::iota(idx.begin(), idx.end(), 0);
      std::shuffle(idx.begin(), idx.end(), rng);
      for (int k = 0; k < pattern.n; ++k) kept[static_cast<std::size_t>(g + idx[static_cast<std::size_t>(k)])] = 0;
    }
  } else if (pattern.kind == SparsityPattern::Kind::kUnstructured) {
    for (auto& k : kept) k = (rng() % 100) >= pattern.fraction * 100;
  }
  const std::int64_t groups = group < 0 ? 1 : cols / group;
  std::vector<std::uint16_t> scales(rows * groups);
  std::vector<std::uint8_t> zeros(rows * groups);
  for (std::size_t i = 0; i < scales.size(); ++i) {
    scales[i] = float_to_f16(0.01f * static_cast<float>(i + 1));
    zeros[i] = static_cast<std::uint8_t>(i % (1u << bits));
  }
  auto packed = pack_matrix(rows, cols, bits, group, pattern, codes, kept, scales, zeros);
  std::vector<float> out(rows * cols);
  unpack_matrix(packed, out);
  const std::int64_t gs = group < 0 ? cols : group;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      auto i = static_cast<std::size_t>(r * cols + c);
      auto g = static_cast<std::size_t>(r * groups + c / gs);
      float expected = kept[i] ? f16_to_float(scales[g]) * (static_cast<float>(codes[i]) - zeros[g]) : 0.0f;
      ASSERT_EQ(out[i], expected) << sparsity << " " << bits << " bits, (" << r << ", " << c << ")";
    }
}

TEST(PackMatrix, RoundTripsEveryPatternAndWidth) {
  for (const char* s : {"none", "2:4", "4:8", "1:4", "0.5"})
    for (int bits : {2, 3, 4, 8})
      for (std::int64_t group : {-1, 8}) check_round_trip(s, bits, group);
}

// Unstructured pruning on a grid with an exact zero stores the pruned
// weights as the zero code, with no mask: smaller, and the same values.
// Without an exact zero (1 bit: -s or +s; a codebook) the mask stays.
TEST(PackMatrix, PrunedWeightsFoldIntoTheZeroCodeWhereTheGridHasOne) {
  const std::int64_t rows = 8, cols = 64;
  std::mt19937 rng(7);
  std::vector<std::uint8_t> codes(rows * cols), kept(rows * cols);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    codes[i] = static_cast<std::uint8_t>(rng() % 4);
    kept[i] = rng() % 10 < 3;
  }
  const std::vector<std::uint16_t> scales(rows, float_to_f16(0.5f));
  auto folded = pack_matrix(rows, cols, 2, -1, SparsityPattern::parse("0.7"), codes, kept, scales,
                            std::vector<std::uint8_t>(rows, 2));
  EXPECT_EQ(folded.sparsity.kind, SparsityPattern::Kind::kDense);
  EXPECT_TRUE(folded.indices.empty());
  EXPECT_EQ(folded.codes.size(), static_cast<std::size_t>(rows * cols * 2 / 8));
  std::vector<float> out(rows * cols);
  unpack_matrix(folded, out);
  for (std::size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], kept[i] ? 0.5f * (static_cast<float>(codes[i]) - 2.0f) : 0.0f) << i;
  for (auto& c : codes) c &= 1;
  auto one_bit = pack_matrix(rows, cols, 1, -1, SparsityPattern::parse("0.7"), codes, kept, scales,
                             std::vector<std::uint8_t>(rows, 0));
  EXPECT_EQ(one_bit.sparsity.kind, SparsityPattern::Kind::kUnstructured);
  EXPECT_EQ(one_bit.indices.size(), static_cast<std::size_t>(rows * cols / 8));
}

TEST(PackMatrix, BitsPerWeightCountsMetadata) {
  // 4 x 8 at 2 bits, 2:4, one scale per row: 16 kept codes x 2 bits (4 bytes),
  // 16 positions x 2 bits (4 bytes), 4 float16 scales (8 bytes), 4 zero points
  // (4 bytes): 20 bytes = 160 bits over 32 weights.
  std::vector<std::uint8_t> codes(32, 1), kept(32);
  for (std::size_t i = 0; i < 32; ++i) kept[i] = i % 2;
  auto p = pack_matrix(4, 8, 2, -1, SparsityPattern::parse("2:4"), codes, kept, std::vector<std::uint16_t>(4, 0x3C00),
                       std::vector<std::uint8_t>(4, 2));
  EXPECT_EQ(p.stored_bytes(), 20u);
  EXPECT_DOUBLE_EQ(p.bits_per_weight(), 5.0);
  // A group keeping three of four is not 2:4.
  kept[2] = 1;
  EXPECT_THROW(pack_matrix(4, 8, 2, -1, SparsityPattern::parse("2:4"), codes, kept,
                           std::vector<std::uint16_t>(4, 0x3C00), std::vector<std::uint8_t>(4, 2)),
               InputError);
}

TEST(PackMatrix, TruncatedDataIsRejected) {
  std::vector<std::uint8_t> codes(32, 3), kept(32, 1);
  auto p =
      pack_matrix(4, 8, 4, -1, {}, codes, kept, std::vector<std::uint16_t>(4, 0x3C00), std::vector<std::uint8_t>(4, 8));
  p.codes.pop_back();
  EXPECT_THROW(p.validate("t"), InputError);
  p = pack_matrix(4, 8, 4, -1, {}, codes, kept, std::vector<std::uint16_t>(4, 0x3C00), std::vector<std::uint8_t>(4, 8));
  p.scales.pop_back();
  EXPECT_THROW(p.validate("t"), InputError);
}

// 1-bit codes are sign x scale: code 0 is -scale, code 1 +scale, whatever the
// sparsity; a non-zero zero point makes the matrix invalid.
TEST(PackMatrix, OneBitCodesAreTheSignGrid) {
  const std::vector<std::uint8_t> codes{0, 1, 1, 0, 1, 1, 0, 0}, kept(8, 1);
  const std::vector<std::uint16_t> scales{float_to_f16(0.5f), float_to_f16(0.25f)};
  auto p = pack_matrix(2, 4, 1, -1, {}, codes, kept, scales, std::vector<std::uint8_t>(2, 0));
  EXPECT_EQ(p.codes.size(), 1u);
  std::vector<float> out(8);
  unpack_matrix(p, out);
  EXPECT_EQ(out, (std::vector<float>{-0.5f, 0.5f, 0.5f, -0.5f, 0.25f, 0.25f, -0.25f, -0.25f}));
  p.zeros[1] = 1;
  EXPECT_THROW(p.validate("t"), InputError);
}

// A codebook gives each group 2^bits levels of its own: code k is level k of
// the weight's row and column group; scales and zero points are then absent.
TEST(PackMatrix, CodebookLevelsDecodePerGroup) {
  // 2 rows x 4 columns, groups of 2 columns, 1-bit codes, 2:4 sparsity.
  const std::vector<std::uint8_t> codes{1, 0, 1, 0, 0, 1, 0, 1}, kept{1, 0, 0, 1, 1, 1, 0, 0};
  std::vector<std::uint16_t> levels;
  for (float v : {-1.0f, 2.0f, -3.0f, 4.0f, -5.0f, 6.0f, -7.0f, 8.0f}) levels.push_back(float_to_f16(v));
  auto p = pack_matrix(2, 4, 1, 2, SparsityPattern::parse("2:4"), codes, kept, {}, {}, levels);
  EXPECT_TRUE(p.has_codebook());
  // codes (1 byte) + positions (1 byte) + 8 float16 levels.
  EXPECT_EQ(p.stored_bytes(), 2u + 16u);
  std::vector<float> out(8);
  unpack_matrix(p, out);
  // Row 0: column 0 in group 0 (code 1: 2), column 3 in group 1 (code 0: -3).
  // Row 1: column 0 in group 0 (code 0: -5), column 1 in group 0 (code 1: 6).
  EXPECT_EQ(out, (std::vector<float>{2.0f, 0.0f, 0.0f, -3.0f, -5.0f, 6.0f, 0.0f, 0.0f}));
  auto short_book = p;
  short_book.codebook.pop_back();
  EXPECT_THROW(short_book.validate("t"), InputError);
  auto both = p;
  both.scales.assign(4, 0x3C00);
  both.zeros.assign(4, 0);
  EXPECT_THROW(both.validate("t"), InputError);
}

// The size allocator: a budget the smallest forms cannot meet is refused,
// a budget everything fits takes the least error everywhere, and a tight
// one spends its bytes where they remove the most error.
TEST(AllocateForms, SpendsBytesWhereTheyRemoveTheMostError) {
  const std::vector<std::vector<FormCost>> two{{{10, 0}, {5, 10}}, {{10, 0}, {5, 100}}};
  EXPECT_THROW(allocate_forms(two, 9), UsageError);
  EXPECT_EQ(allocate_forms(two, 20), (std::vector<std::size_t>{0, 0}));
  EXPECT_EQ(allocate_forms(two, 15), (std::vector<std::size_t>{1, 0}));  // error 10, not 100
  EXPECT_EQ(allocate_forms(two, 10), (std::vector<std::size_t>{1, 1}));
}

// Errors in units of calibration loss: a layer whose output error barely
// moves the loss gives up its bytes to one whose smaller error moves it
// much; a probe that lowered the loss (noise) is charged the floor, a tenth
// of the mean positive loss, not nothing.
TEST(AllocateForms, WeighsEachLayersErrorByTheLossItsProbeAdded) {
  std::vector<std::vector<FormCost>> costs{{{10, 0}, {5, 100}}, {{10, 0}, {5, 50}}, {{10, 0}, {5, 40}}};
  // By raw error, the one large form goes to layer 0 (100 removed).
  EXPECT_EQ(allocate_forms(costs, 20), (std::vector<std::size_t>{0, 1, 1}));
  weigh_errors_by_loss(costs, {0.001, 1.0, -0.2}, 1);
  const double floor = 0.1 * (0.001 + 1.0) / 2;
  EXPECT_DOUBLE_EQ(costs[0][1].error, floor);  // 0.001 is under the floor
  EXPECT_DOUBLE_EQ(costs[1][1].error, 1.0);
  EXPECT_DOUBLE_EQ(costs[2][1].error, floor);  // lowered the loss: the floor
  EXPECT_EQ(costs[0][0].error, 0.0);
  EXPECT_EQ(costs[1][0].bytes, 10u);  // bytes untouched
  // By loss, it goes to layer 1, whose raw error was half of layer 0's.
  EXPECT_EQ(allocate_forms(costs, 20), (std::vector<std::size_t>{1, 0, 1}));
  EXPECT_THROW(weigh_errors_by_loss(costs, {1.0}, 1), InputError);
  EXPECT_THROW(weigh_errors_by_loss(costs, {1.0, 1.0, 1.0}, 2), InputError);
}

// On random instances: the choice fits, beats every uniform choice that
// fits, and no single layer can move to another form that fits and lowers
// the total error.
TEST(AllocateForms, FitsAndIsLocallyOptimalOnRandomInstances) {
  std::mt19937 rng(5);
  for (int instance = 0; instance < 200; ++instance) {
    const std::size_t layers = 1 + rng() % 12, forms = 1 + rng() % 6;
    std::vector<std::vector<FormCost>> costs(layers);
    for (auto& layer : costs)
      for (std::size_t f = 0; f < forms; ++f)
        layer.push_back({100 + rng() % 1000, static_cast<double>(rng() % 10000) / 7.0});
    std::uint64_t low = 0, high = 0;
    for (const auto& layer : costs) {
      std::uint64_t lo = UINT64_MAX, hi = 0;
      for (const auto& c : layer) lo = std::min(lo, c.bytes), hi = std::max(hi, c.bytes);
      low += lo;
      high += hi;
    }
    const std::uint64_t budget = low + rng() % (high - low + 1);
    const auto choice = allocate_forms(costs, budget);
    std::uint64_t bytes = 0;
    double error = 0;
    for (std::size_t l = 0; l < layers; ++l) bytes += costs[l][choice[l]].bytes, error += costs[l][choice[l]].error;
    ASSERT_LE(bytes, budget) << "instance " << instance;
    for (std::size_t f = 0; f < forms; ++f) {
      std::uint64_t uniform_bytes = 0;
      double uniform_error = 0;
      for (const auto& layer : costs) uniform_bytes += layer[f].bytes, uniform_error += layer[f].error;
      if (uniform_bytes <= budget) {
        EXPECT_LE(error, uniform_error + 1e-9) << "instance " << instance;
      }
    }
    for (std::size_t l = 0; l < layers; ++l)
      for (std::size_t f = 0; f < forms; ++f) {
        const auto& now = costs[l][choice[l]];
        if (bytes - now.bytes + costs[l][f].bytes <= budget) {
          EXPECT_GE(costs[l][f].error, now.error) << "instance " << instance << " layer " << l;
        }
      }
  }
}

// The estimate of a matrix's bytes counts each array through zstd plus its
// metadata: zeros compress to almost nothing, random codes do not.
TEST(EstimatedContainerBytes, CompressesEachArray) {
  std::mt19937 rng(9);
  std::vector<std::uint8_t> random_codes(64 * 256), zero_codes(64 * 256, 0), kept(64 * 256, 1);
  for (auto& c : random_codes) c = static_cast<std::uint8_t>(rng() % 16);
  const std::vector<std::uint16_t> scales(64, 0x3C00);
  const std::vector<std::uint8_t> zeros(64, 8);
  const auto noisy = pack_matrix(64, 256, 4, -1, {}, random_codes, kept, scales, zeros);
  const auto flat = pack_matrix(64, 256, 4, -1, {}, zero_codes, kept, scales, zeros);
  const auto noisy_bytes = estimated_container_bytes(noisy, 9, 0), flat_bytes = estimated_container_bytes(flat, 9, 0);
  EXPECT_GE(noisy_bytes, noisy.codes.size() * 95 / 100);
  EXPECT_LE(noisy_bytes, noisy.stored_bytes());
  EXPECT_LT(flat_bytes, 200u);
  EXPECT_EQ(estimated_container_bytes(flat, 9, 100), flat_bytes + 3 * 100);  // codes, scales, zeros
}

}  // namespace
}  // namespace fleet::deltazip
