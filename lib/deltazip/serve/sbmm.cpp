#include "deltazip/serve/sbmm.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/error.h"
#include "common/half.h"

namespace fleet::deltazip {
namespace {

constexpr std::size_t kPadding = 8;

std::vector<std::uint8_t> padded(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint8_t> out(bytes.size() + kPadding, 0);
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

// `count` bits (at most 57) starting at bit `bit` of an LSB-first stream.
inline unsigned read_bits(const std::uint8_t* data, std::uint64_t bit, int count) {
  std::uint64_t word;
  std::memcpy(&word, data + bit / 8, sizeof word);  // little-endian machines (x86-64, aarch64)
  return static_cast<unsigned>((word >> (bit % 8)) & ((std::uint64_t{1} << count) - 1));
}

// Sum of a[i] * b[i] with eight interleaved partial sums, in a fixed order:
// the compiler turns the lanes into vector registers.
inline float dot(const float* a, const float* b, std::int64_t n) {
  typedef float v8 __attribute__((vector_size(32)));
  v8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 va, vb;
    std::memcpy(&va, a + i, sizeof va);
    std::memcpy(&vb, b + i, sizeof vb);
    acc += va * vb;
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

SbmmMatrix::SbmmMatrix(const PackedMatrix& p)
    : rows_(p.rows), cols_(p.cols), group_size_(p.group_size), bits_(p.bits), sparsity_(p.sparsity) {
  p.validate("delta matrix");
  groups_ = p.groups();
  codes_ = padded(p.codes);
  indices_ = padded(p.indices);
  scales_.resize(p.scales.size());
  zeros_.resize(p.zeros.size());
  for (std::size_t i = 0; i < scales_.size(); ++i) {
    scales_[i] = f16_to_float(p.scales[i]);
    zeros_[i] = static_cast<float>(p.zeros[i]);
  }
  if (sparsity_.kind == SparsityPattern::Kind::kNOfM)
    index_bits_ = std::bit_width(static_cast<unsigned>(sparsity_.m - 1));
  if (sparsity_.kind == SparsityPattern::Kind::kUnstructured) {
    row_code_bit_.resize(static_cast<std::size_t>(rows_) + 1, 0);
    for (std::int64_t o = 0; o < rows_; ++o) {
      std::uint64_t kept = 0;
      for (std::int64_t c = 0; c < cols_; ++c) kept += read_bits(indices_.data(), static_cast<std::uint64_t>(o * cols_ + c), 1);
      row_code_bit_[static_cast<std::size_t>(o) + 1] = row_code_bit_[static_cast<std::size_t>(o)] + kept * static_cast<std::uint64_t>(bits_);
    }
  }
}

std::uint64_t SbmmMatrix::bytes() const {
  return codes_.size() + indices_.size() + (scales_.size() + zeros_.size()) * sizeof(float) +
         row_code_bit_.size() * sizeof(std::uint64_t);
}

void SbmmMatrix::decode_row(std::int64_t o, float* out) const {
  const float* scale = scales_.data() + o * groups_;
  const float* zero = zeros_.data() + o * groups_;
  const std::uint8_t* codes = codes_.data();
  // Value of a kept weight in column c with code q.
  auto value = [&](std::int64_t c, unsigned q) {
    const auto g = groups_ == 1 ? 0 : c / group_size_;
    return scale[g] * (static_cast<float>(q) - zero[g]);
  };
  switch (sparsity_.kind) {
    case SparsityPattern::Kind::kDense: {
      std::uint64_t bit = static_cast<std::uint64_t>(o * cols_) * static_cast<std::uint64_t>(bits_);
      for (std::int64_t c = 0; c < cols_; ++c, bit += static_cast<std::uint64_t>(bits_))
        out[c] = value(c, read_bits(codes, bit, bits_));
      break;
    }
    case SparsityPattern::Kind::kNOfM: {
      const std::int64_t m = sparsity_.m, keep = sparsity_.kept_per_group();
      const auto first = static_cast<std::uint64_t>(o * (cols_ / m) * keep);
      std::uint64_t code_bit = first * static_cast<std::uint64_t>(bits_);
      std::uint64_t index_bit = first * static_cast<std::uint64_t>(index_bits_);
      std::fill(out, out + cols_, 0.0f);
      for (std::int64_t g = 0; g < cols_; g += m)
        for (std::int64_t k = 0; k < keep; ++k) {
          const auto pos = static_cast<std::int64_t>(read_bits(indices_.data(), index_bit, index_bits_));
          index_bit += static_cast<std::uint64_t>(index_bits_);
          const auto c = g + std::min(pos, m - 1);  // validated containers never exceed m - 1
          out[c] = value(c, read_bits(codes, code_bit, bits_));
          code_bit += static_cast<std::uint64_t>(bits_);
        }
      break;
    }
    case SparsityPattern::Kind::kUnstructured: {
      std::uint64_t code_bit = row_code_bit_[static_cast<std::size_t>(o)];
      const auto mask_bit = static_cast<std::uint64_t>(o * cols_);
      for (std::int64_t c = 0; c < cols_; ++c) {
        if (read_bits(indices_.data(), mask_bit + static_cast<std::uint64_t>(c), 1)) {
          out[c] = value(c, read_bits(codes, code_bit, bits_));
          code_bit += static_cast<std::uint64_t>(bits_);
        } else {
          out[c] = 0.0f;
        }
      }
      break;
    }
  }
}

void SbmmMatrix::multiply_add(const float* x, std::int64_t n, std::int64_t x_stride, float* y, std::int64_t y_stride,
                              std::int64_t row_begin, std::int64_t row_end) const {
  if (row_begin < 0 || row_end > rows_ || row_begin > row_end) throw UsageError("multiply_add: row range out of bounds");
  std::vector<float> row(static_cast<std::size_t>(cols_));
  for (std::int64_t o = row_begin; o < row_end; ++o) {
    decode_row(o, row.data());
    for (std::int64_t r = 0; r < n; ++r) y[r * y_stride + o] += dot(x + r * x_stride, row.data(), cols_);
  }
}

}  // namespace fleet::deltazip
