// Packing of codes, n:m positions and masks; bits-per-weight arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/half.h"
#include "deltazip/packing.h"

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

}  // namespace
}  // namespace fleet::deltazip
