// The embedding's row delta: which rows are kept, how close the decoded
// values are, and what a corrupt one looks like.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "common/half.h"
#include "deltazip/row_delta.h"

namespace fleet::deltazip {
namespace {

// A [rows, cols] delta whose rows have very different sizes: every fourth
// row is untouched (0), every fourth one barely moved, the rest moved.
std::vector<float> uneven_delta(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> d(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float size = r % 4 == 0 ? 0.0f : r % 4 == 1 ? 1e-6f : 0.01f * static_cast<float>(1 + r % 7);
    for (std::int64_t c = 0; c < cols; ++c) d[static_cast<std::size_t>(r * cols + c)] = size * normal(rng);
  }
  return d;
}

TEST(RowDelta, KeepsExactlyTheRowsThatAreNotZeroAtTheTensorsScale) {
  const std::int64_t rows = 40, cols = 24;
  const auto d = uneven_delta(rows, cols, 1);
  for (int bits : {2, 4, 8}) {
    const RowDelta packed = encode_row_delta(d, rows, cols, bits);
    const float top = static_cast<float>((1 << (bits - 1)) - 1);
    const float all_max =
        std::fabs(*std::max_element(d.begin(), d.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); }));
    std::vector<std::int32_t> expected;
    for (std::int64_t r = 0; r < rows; ++r) {
      float m = 0;
      for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, std::fabs(d[static_cast<std::size_t>(r * cols + c)]));
      if (m > 0 && m >= all_max / (2 * top)) expected.push_back(static_cast<std::int32_t>(r));
    }
    EXPECT_EQ(packed.kept_rows, expected) << bits << " bits";
    // At 4 and 8 bits every moved row is kept (the smallest moved one is 1/7
    // of the largest); at 2 bits (levels -1, 0, 1) the smaller ones round to zero.
    if (bits >= 4) {
      EXPECT_EQ(packed.kept_rows.size(), 20u) << bits << " bits";
    }
    for (std::int32_t r : packed.kept_rows) EXPECT_GE(r % 4, 2) << "row " << r << " is untouched or barely moved";
    EXPECT_EQ(packed.stored_bytes(), packed.kept_rows.size() * 4 + packed.codes.size() + packed.scales.size() * 2);
  }
}

TEST(RowDelta, DecodedValuesAreWithinHalfAStepOfTheirRow) {
  const std::int64_t rows = 40, cols = 24;
  const auto d = uneven_delta(rows, cols, 2);
  for (int bits : {2, 3, 4, 8}) {
    const RowDelta packed = encode_row_delta(d, rows, cols, bits);
    std::vector<float> out(d.size(), -1.0f);
    decode_row_delta(packed, out);
    const float top = static_cast<float>((1 << (bits - 1)) - 1);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto kept = std::find(packed.kept_rows.begin(), packed.kept_rows.end(), r);
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto i = static_cast<std::size_t>(r * cols + c);
        if (kept == packed.kept_rows.end()) {
          EXPECT_EQ(out[i], 0.0f);
          continue;
        }
        const float scale = f16_to_float(packed.scales[static_cast<std::size_t>(kept - packed.kept_rows.begin())]);
        // The scale is max|row| / top rounded to float16; the largest value may clamp by that rounding.
        EXPECT_LE(std::fabs(out[i] - d[i]), scale * 0.5f + std::fabs(d[i]) * 1e-3f) << bits << " bits, row " << r;
        EXPECT_LE(std::fabs(out[i]), scale * top * (1 + 1e-6f));
      }
    }
  }
}

TEST(RowDelta, AZeroDeltaKeepsNoRow) {
  const std::vector<float> zero(12 * 5, 0.0f);
  const RowDelta packed = encode_row_delta(zero, 12, 5, 8);
  EXPECT_TRUE(packed.kept_rows.empty());
  EXPECT_TRUE(packed.codes.empty());
  std::vector<float> out(zero.size(), 1.0f);
  decode_row_delta(packed, out);
  EXPECT_EQ(out, zero);
}

TEST(RowDelta, CorruptFormsAreRejected) {
  const auto d = uneven_delta(16, 8, 3);
  const RowDelta good = encode_row_delta(d, 16, 8, 4);
  ASSERT_GE(good.kept_rows.size(), 2u);
  EXPECT_NO_THROW(good.validate("t"));
  auto broken = [&](auto edit, const char* says) {
    RowDelta b = good;
    edit(b);
    try {
      b.validate("t");
      ADD_FAILURE() << "accepted: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  broken([](RowDelta& b) { b.kept_rows.back() = 16; }, "outside the tensor");
  broken([](RowDelta& b) { b.kept_rows[0] = -1; }, "outside the tensor");
  broken([](RowDelta& b) { std::swap(b.kept_rows[0], b.kept_rows[1]); }, "strictly increasing");
  broken([](RowDelta& b) { b.kept_rows[1] = b.kept_rows[0]; }, "strictly increasing");
  broken([](RowDelta& b) { b.scales.pop_back(); }, "one scale per kept row");
  broken([](RowDelta& b) { b.codes.pop_back(); }, "codes do not match");
  broken([](RowDelta& b) { b.bits = 9; }, "outside 2..8");
  EXPECT_THROW(encode_row_delta(d, 16, 8, 1), UsageError);
  EXPECT_THROW(encode_row_delta(d, 16, 9, 8), UsageError);
}

}  // namespace
}  // namespace fleet::deltazip
