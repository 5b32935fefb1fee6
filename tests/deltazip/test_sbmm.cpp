// The SBMM kernel against dequantize-then-matmul, for every bit width and
// sparsity form, per-row and per-group scales or codebooks, one and several
// input rows.
#include <random>

#include <gtest/gtest.h>

#include "common/half.h"
#include "deltazip/packing.h"
#include "deltazip/sbmm/sbmm.h"

namespace fleet::deltazip {
namespace {

struct Case {
  int bits;
  std::string sparsity;
  std::int64_t group_size;
  bool codebook = false;  ///< non-uniform levels per group instead of scales
};

// A random packed matrix of the given form.
PackedMatrix random_matrix(std::int64_t rows, std::int64_t cols, const Case& c, std::mt19937& rng) {
  const auto pattern = SparsityPattern::parse(c.sparsity);
  const std::int64_t group = c.group_size <= 0 ? cols : c.group_size;
  const std::int64_t groups = (cols + group - 1) / group;
  std::uniform_int_distribution<int> code(0, (1 << c.bits) - 1);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), unit(0.0f, 1.0f);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols)), kept(codes.size(), 1);
  for (auto& q : codes) q = static_cast<std::uint8_t>(code(rng));
  if (pattern.kind == SparsityPattern::Kind::kNOfM) {
    std::vector<int> order(static_cast<std::size_t>(pattern.m));
    for (std::size_t g = 0; g < kept.size(); g += static_cast<std::size_t>(pattern.m)) {
      for (int k = 0; k < pattern.m; ++k) order[static_cast<std::size_t>(k)] = k;
      std::shuffle(order.begin(), order.end(), rng);
      for (int k = 0; k < pattern.n; ++k) kept[g + static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = 0;
    }
  } else if (pattern.kind == SparsityPattern::Kind::kUnstructured) {
    for (auto& k : kept) k = unit(rng) >= pattern.fraction;
  }
  if (c.codebook) {
    std::vector<std::uint16_t> levels(static_cast<std::size_t>(rows * groups) << c.bits);
    std::uniform_real_distribution<float> level(-0.1f, 0.1f);
    for (auto& v : levels) v = float_to_f16(level(rng));
    return pack_matrix(rows, cols, c.bits, c.group_size, pattern, codes, kept, {}, {}, std::move(levels));
  }
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(rows * groups));
  std::vector<std::uint8_t> zeros(scales.size());
  for (std::size_t i = 0; i < scales.size(); ++i) {
    scales[i] = float_to_f16(scale(rng));
    zeros[i] = c.bits == 1 ? 0 : static_cast<std::uint8_t>(code(rng));  // 1 bit: the sign grid
  }
  return pack_matrix(rows, cols, c.bits, c.group_size, pattern, codes, kept, std::move(scales), std::move(zeros));
}

// The kernel sets this CPU can run for the fused 2:4 form: portable, AVX2,
// AVX-512.
struct Kernels {
  bool vector, avx512;
  std::string name() const { return !vector ? "portable" : avx512 ? "AVX-512" : "AVX2"; }
  void select() const {
    SbmmMatrix::use_vector_kernels(vector);
    SbmmMatrix::use_avx512(avx512);
  }
};

std::vector<Kernels> kernel_sets() {
  std::vector<Kernels> sets{{false, false}};
  SbmmMatrix::use_vector_kernels(true);
  SbmmMatrix::use_avx512(true);
  if (SbmmMatrix::vector_kernels()) sets.push_back({true, false});
  if (SbmmMatrix::avx512_in_use()) sets.push_back({true, true});
  return sets;
}

void restore_default_kernels() { Kernels{true, true}.select(); }

// y [n rows, y_stride apart] equals `initial` + x [n rows, x_stride apart] ·
// denseᵀ ([rows, cols]), in double, within 1e-5 of the terms' magnitude.
void expect_product(const std::vector<float>& y, std::int64_t y_stride, float initial, const std::vector<float>& x,
                    std::int64_t x_stride, const std::vector<float>& dense, std::int64_t n, std::int64_t rows,
                    std::int64_t cols, const std::string& what) {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < rows; ++o) {
      double expected = initial, magnitude = 0;
      for (std::int64_t k = 0; k < cols; ++k) {
        const double term = static_cast<double>(x[static_cast<std::size_t>(r * x_stride + k)]) *
                            dense[static_cast<std::size_t>(o * cols + k)];
        expected += term;
        magnitude += std::abs(term);
      }
      EXPECT_NEAR(y[static_cast<std::size_t>(r * y_stride + o)], expected, 1e-5 * (magnitude + 1))
          << what << ": row " << r << " output " << o;
    }
}

class SbmmAgainstDequantized : public ::testing::TestWithParam<Case> {};

TEST_P(SbmmAgainstDequantized, EqualsDequantizeThenMatmul) {
  const auto c = GetParam();
  std::mt19937 rng(7);
  const std::int64_t rows = 24, cols = 96;
  const auto packed = random_matrix(rows, cols, c, rng);
  std::vector<float> dense(static_cast<std::size_t>(rows * cols));
  unpack_matrix(packed, dense);
  const SbmmMatrix matrix(packed);
  std::vector<float> row(static_cast<std::size_t>(cols));
  for (std::int64_t o = 0; o < rows; ++o) {
    matrix.decode_row(o, row.data());
    for (std::int64_t k = 0; k < cols; ++k)
      ASSERT_EQ(row[static_cast<std::size_t>(k)], dense[static_cast<std::size_t>(o * cols + k)]);
  }
  // Every kernel set for the fused 2:4 form.
  for (const auto& kernels : kernel_sets()) {
    kernels.select();
    for (std::int64_t n : {1, 5, 16}) {
      std::normal_distribution<float> normal(0, 1);
      const std::int64_t x_stride = cols + 3, y_stride = rows + 2;  // strides wider than the rows
      std::vector<float> x(static_cast<std::size_t>(n * x_stride)), y(static_cast<std::size_t>(n * y_stride), 0.5f);
      for (auto& v : x) v = normal(rng);
      // Two disjoint row ranges, as two threads would take them.
      matrix.multiply_add(x.data(), n, x_stride, y.data(), y_stride, 0, 10);
      matrix.multiply_add(x.data(), n, x_stride, y.data(), y_stride, 10, rows);
      expect_product(y, y_stride, 0.5f, x, x_stride, dense, n, rows, cols, kernels.name());
      for (std::int64_t r = 0; r < n; ++r)  // padding columns untouched
        for (std::int64_t o = rows; o < y_stride; ++o) EXPECT_EQ(y[static_cast<std::size_t>(r * y_stride + o)], 0.5f);
    }
  }
  restore_default_kernels();
}

INSTANTIATE_TEST_SUITE_P(
    Forms, SbmmAgainstDequantized,
    ::testing::Values(Case{2, "none", -1}, Case{3, "none", -1}, Case{4, "none", -1}, Case{8, "none", -1},
                      Case{2, "2:4", -1}, Case{3, "2:4", -1}, Case{4, "2:4", -1}, Case{8, "2:4", -1},
                      Case{4, "4:8", -1}, Case{4, "2:4", 32}, Case{2, "none", 32}, Case{3, "0.5", -1},
                      Case{4, "0.7", 32}, Case{8, "0.3", -1}, Case{1, "none", -1}, Case{1, "2:4", 32},
                      Case{2, "2:4", -1, true}, Case{4, "2:4", -1, true}, Case{1, "none", 32, true},
                      Case{3, "0.5", -1, true}, Case{2, "none", 32, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string s = info.param.sparsity;
      for (auto& ch : s)
        if (ch == ':' || ch == '.') ch = '_';
      return "bits" + std::to_string(info.param.bits) + "_" + s + "_group" +
             (info.param.group_size < 0 ? std::string("row") : std::to_string(info.param.group_size)) +
             (info.param.codebook ? "_codebook" : "");
    });

// The x86 kernels (AVX2, and AVX-512 where the CPU has it) against the
// portable ones on the fused 2:4 form: the same decoded weights bit for bit,
// the same products up to summation order, for rows of one to twelve
// 8-column chunks (a lone chunk, whole pairs, pairs and a lone one, for the
// 16-column vectors) and of 33 and 65 (the AVX-512 kernels read the masks of
// 32 chunks at once, then the rest one by one), and every block of input
// rows (1-8, then whole blocks and a remainder).
TEST(Sbmm, VectorKernelsMatchThePortableOnes) {
  const auto sets = kernel_sets();
  if (sets.size() < 2) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  std::mt19937 rng(3);
  for (int bits : {2, 4})
    for (std::int64_t cols : {8, 16, 24, 40, 48, 96, 264, 520}) {
      const std::int64_t rows = 7;
      const SbmmMatrix matrix(random_matrix(rows, cols, Case{bits, "2:4", -1}, rng));
      ASSERT_TRUE(matrix.fused_2of4());
      std::vector<float> portable_tile(static_cast<std::size_t>(rows * cols));
      sets.front().select();
      matrix.decode_rows(0, rows, portable_tile.data());
      std::normal_distribution<float> normal(0, 1);
      for (std::int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17}) {
        std::vector<float> x(static_cast<std::size_t>(n * cols)), portable_y(static_cast<std::size_t>(n * rows), 0.0f);
        for (auto& v : x) v = normal(rng);
        sets.front().select();
        matrix.multiply_add(x.data(), n, cols, portable_y.data(), rows, 0, rows);
        for (std::size_t k = 1; k < sets.size(); ++k) {
          sets[k].select();
          std::vector<float> tile(portable_tile.size(), -1.0f), y(portable_y.size(), 0.0f);
          matrix.decode_rows(0, rows, tile.data());
          ASSERT_EQ(tile, portable_tile) << sets[k].name() << ", " << bits << " bits, " << cols << " columns";
          matrix.multiply_add(x.data(), n, cols, y.data(), rows, 0, rows);
          for (std::size_t i = 0; i < y.size(); ++i) {
            double magnitude = 0;
            const auto r = static_cast<std::int64_t>(i) / rows, o = static_cast<std::int64_t>(i) % rows;
            for (std::int64_t c = 0; c < cols; ++c)
              magnitude += std::abs(static_cast<double>(x[static_cast<std::size_t>(r * cols + c)]) *
                                    portable_tile[static_cast<std::size_t>(o * cols + c)]);
            EXPECT_NEAR(y[i], portable_y[i], 1e-5 * (magnitude + 1))
                << sets[k].name() << ", " << bits << " bits, " << cols << " columns, " << n << " rows, entry " << i;
          }
        }
      }
    }
  restore_default_kernels();
}

// The prefill path decodes Δ + W in one pass: the same floats as decoding
// and adding W afterwards, with every kernel and for forms without the
// vector kernels as well.
TEST(Sbmm, DecodedRowsPlusADenseMatrixEqualDecodingThenAdding) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0, 1);
  for (const Case& form : {Case{4, "2:4", -1}, Case{2, "2:4", -1}, Case{3, "none", 8}})
    for (std::int64_t cols : {8, 40, 96}) {
      const std::int64_t rows = 9, begin = 2, end = 7, count = end - begin;
      const SbmmMatrix matrix(random_matrix(rows, cols, form, rng));
      std::vector<float> plus(static_cast<std::size_t>(count * cols));
      for (auto& v : plus) v = normal(rng);
      for (const auto& set : kernel_sets()) {
        set.select();
        std::vector<float> want(plus.size(), -1.0f), got(plus.size(), -1.0f);
        matrix.decode_rows(begin, end, want.data());
        for (std::size_t i = 0; i < want.size(); ++i) want[i] += plus[i];
        matrix.decode_rows(begin, end, got.data(), plus.data());
        EXPECT_EQ(got, want) << set.name() << ", " << form.bits << " bits, " << cols << " columns";
      }
    }
  restore_default_kernels();
}

// A 2:4 group may name its kept columns in either order (the packer writes
// the lower first; a file need not). The AVX-512 kernels hand codes to lanes
// in column order, so the matrix reorders such groups on loading: every
// kernel must still decode what the packing library decodes.
TEST(Sbmm, GroupsNamingTheHigherColumnFirstDecodeAsWritten) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  for (int bits : {2, 4}) {
    const std::int64_t rows = 5, cols = 264;
    PackedMatrix packed = random_matrix(rows, cols, Case{bits, "2:4", -1}, rng);
    // Swap the two positions and the two codes of every other group.
    const unsigned code_mask = (1u << bits) - 1u;
    for (std::size_t i = 0; i < packed.indices.size(); ++i)
      for (int half = 0; half < 2; ++half) {
        if ((i + static_cast<std::size_t>(half)) % 2 == 1) continue;
        const unsigned nibble = (packed.indices[i] >> (4 * half)) & 15u;
        const unsigned swapped_nibble = (nibble >> 2) | (nibble & 3u) << 2;
        packed.indices[i] =
            static_cast<std::uint8_t>((packed.indices[i] & ~(15u << (4 * half))) | swapped_nibble << (4 * half));
        const std::size_t bit = (2 * i + static_cast<std::size_t>(half)) * 2 * static_cast<std::size_t>(bits);
        std::uint8_t& byte = packed.codes[bit / 8];
        const unsigned shift = bit % 8, a = (byte >> shift) & code_mask, b = (byte >> (shift + bits)) & code_mask;
        byte =
            static_cast<std::uint8_t>((byte & ~((code_mask | code_mask << bits) << shift)) | (b | a << bits) << shift);
      }
    std::vector<float> want(static_cast<std::size_t>(rows * cols));
    unpack_matrix(packed, {want.data(), want.size()});
    const SbmmMatrix matrix(packed);
    std::vector<float> x(static_cast<std::size_t>(3 * cols));
    for (auto& v : x) v = normal(rng);
    for (const auto& set : kernel_sets()) {
      set.select();
      std::vector<float> got(want.size(), -1.0f), y(static_cast<std::size_t>(3 * rows), 0.0f);
      matrix.decode_rows(0, rows, got.data());
      EXPECT_EQ(got, want) << set.name() << ", " << bits << " bits";
      matrix.multiply_add(x.data(), 3, cols, y.data(), rows, 0, rows);
      expect_product(y, rows, 0.0f, x, cols, want, 3, rows, cols, set.name() + ", " + std::to_string(bits) + " bits");
    }
  }
  restore_default_kernels();
}

TEST(Sbmm, RejectsRowRangesOutsideTheMatrix) {
  std::mt19937 rng(1);
  const SbmmMatrix matrix(random_matrix(4, 8, Case{4, "2:4", -1}, rng));
  float x[8] = {}, y[4] = {};
  EXPECT_ANY_THROW(matrix.multiply_add(x, 1, 8, y, 4, 0, 5));
  EXPECT_ANY_THROW(matrix.multiply_add(x, 1, 8, y, 4, 3, 2));
}

}  // namespace
}  // namespace fleet::deltazip
