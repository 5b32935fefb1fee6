// Half and bfloat16 conversions against the compiler's own _Float16 (an
// independent, IEEE-exact implementation in libgcc) and hand-worked values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "common/half.h"

namespace fleet {
namespace {

TEST(Half, EveryF16BitPatternDecodesLikeTheCompiler) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float ours = f16_to_float(h);
    const float reference = static_cast<float>(std::bit_cast<_Float16>(h));
    if (std::isnan(reference)) {
      EXPECT_TRUE(std::isnan(ours)) << bits;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(ours), std::bit_cast<std::uint32_t>(reference)) << bits;
    }
  }
}

TEST(Half, FloatToF16RoundsLikeTheCompiler) {
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               1e-8f,
                               5.96e-8f,
                               2.98e-8f,
                               2.99e-8f,
                               6.1e-5f,
                               1.0f + 1.0f / 2048.0f,
                               1.0f + 3.0f / 2048.0f,
                               INFINITY,
                               -INFINITY};
  for (int i = 0; i < 200000; ++i) values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (float v : values) {
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(v))));
      continue;
    }
    const auto reference = std::bit_cast<std::uint16_t>(static_cast<_Float16>(v));
    EXPECT_EQ(float_to_f16(v), reference) << v;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up to even.
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256.0f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(3.4e38f))));
}

}  // namespace
}  // namespace fleet
