// The small-batch linear kernel against a double-precision reference, for
// shapes that leave every remainder (rows not a multiple of four, outputs not
// a multiple of three, inputs not a multiple of eight), strided rows and
// accumulation; and its promise that an output does not depend on the rows
// computed beside it.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "model/small_batch_linear.h"

namespace fleet::model {
namespace {

std::vector<float> random_values(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The AVX2 kernel, and the AVX-512 one where the CPU has it.
std::vector<bool> widths() {
  if (small_batch::avx512_available()) return {false, true};
  return {false};
}

TEST(SmallBatchLinear, EqualsTheProductInDoublePrecision) {
  if (!small_batch::available()) GTEST_SKIP() << "this CPU has no AVX2+FMA; the BLAS GEMM is used instead";
  std::mt19937 rng(3);
  for (bool wide : widths()) {
    small_batch::use_avx512(wide);
    for (std::int64_t in : {5, 8, 13, 16, 64, 67})
      for (std::int64_t count : {1, 2, 3, 4, 5, 7, 11})
        for (std::int64_t rows : {1, 2, 3, 4, 5, 9})
          for (bool accumulate : {false, true}) {
            const std::int64_t x_stride = in + 3, y_stride = count + 2;
            const auto x = random_values(static_cast<std::size_t>(rows * x_stride), rng);
            const auto w = random_values(static_cast<std::size_t>(count * in), rng);
            const auto start = random_values(static_cast<std::size_t>(rows * y_stride), rng);
            auto y = start;
            small_batch::linear(x.data(), rows, in, x_stride, w.data(), count, y.data(), y_stride, accumulate);
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t j = 0; j < y_stride; ++j) {
                const auto at = static_cast<std::size_t>(r * y_stride + j);
                if (j >= count) {  // outside the outputs: untouched
                  EXPECT_EQ(y[at], start[at]);
                  continue;
                }
                double want = accumulate ? start[at] : 0.0;
                for (std::int64_t k = 0; k < in; ++k)
                  want += static_cast<double>(x[static_cast<std::size_t>(r * x_stride + k)]) *
                          w[static_cast<std::size_t>(j * in + k)];
                EXPECT_NEAR(y[at], want, 1e-5 * (std::sqrt(static_cast<double>(in)) + 1))
                    << (wide ? "AVX-512" : "AVX2") << ": in " << in << ", outputs " << count << ", rows " << rows
                    << ", row " << r << ", output " << j;
              }
          }
  }
  small_batch::use_avx512(true);
}

TEST(SmallBatchLinear, AnOutputDoesNotDependOnTheRowsBesideIt) {
  if (!small_batch::available()) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  for (bool wide : widths()) {
    small_batch::use_avx512(wide);
    std::mt19937 rng(5);
    const std::int64_t rows = 11, in = 77, count = 10;
    const auto x = random_values(static_cast<std::size_t>(rows * in), rng);
    const auto w = random_values(static_cast<std::size_t>(count * in), rng);
    std::vector<float> all(static_cast<std::size_t>(rows * count)), one(static_cast<std::size_t>(count));
    small_batch::linear(x.data(), rows, in, in, w.data(), count, all.data(), count);
    for (std::int64_t r = 0; r < rows; ++r) {
      small_batch::linear(x.data() + r * in, 1, in, in, w.data(), count, one.data(), count);
      for (std::int64_t j = 0; j < count; ++j)  // bit for bit: one sum in one order
        EXPECT_EQ(one[static_cast<std::size_t>(j)], all[static_cast<std::size_t>(r * count + j)]) << "row " << r;
    }
    // Outputs split between two calls (two threads' ranges) give the same bits.
    std::vector<float> split(all.size());
    small_batch::linear(x.data(), rows, in, in, w.data(), 4, split.data(), count);
    small_batch::linear(x.data(), rows, in, in, w.data() + 4 * in, count - 4, split.data() + 4, count);
    EXPECT_EQ(split, all);
  }
  small_batch::use_avx512(true);
}

// The row limit never reaches past what was measured: rows of more floats
// get no more rows (x read again for every block of weight rows), and
// beyond 96 rows x stays within the 4 MiB measured (256 rows of 4096).
TEST(SmallBatchLinear, RowLimitShrinksWithTheRowWidth) {
  if (!small_batch::available()) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  for (bool wide : widths()) {
    small_batch::use_avx512(wide);
    std::int64_t previous = small_batch::max_rows();
    EXPECT_GE(previous, 32);
    EXPECT_LE(previous, 256);
    for (std::int64_t in : std::vector<std::int64_t>{45, 768, 2048, 4096, 4097, 11008, 16384, 1 << 20}) {
      const std::int64_t limit = small_batch::max_rows(in);
      EXPECT_LE(limit, previous) << "rows of " << in << " floats";
      EXPECT_GE(limit, 32) << "rows of " << in << " floats";
      EXPECT_TRUE(limit <= 96 || limit * in <= 256 * 4096) << "rows of " << in << " floats: " << limit;
      previous = limit;
    }
  }
  small_batch::use_avx512(true);
}

}  // namespace
}  // namespace fleet::model
