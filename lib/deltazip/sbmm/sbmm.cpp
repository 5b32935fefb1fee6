#include "deltazip/sbmm/sbmm.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "common/error.h"
#include "common/half.h"
#include "deltazip/sbmm/sbmm_2of4_x86.h"

namespace fleet::deltazip {
namespace {

constexpr std::size_t kPadding = 8;

std::atomic<bool> vector_kernels_enabled{true};
std::atomic<bool> avx512_wanted{true};

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

}  // namespace

SbmmMatrix::SbmmMatrix(const PackedMatrix& p)
    : rows_(p.rows), cols_(p.cols), group_size_(p.group_size), bits_(p.bits), sparsity_(p.sparsity) {
  p.validate("delta matrix");
  groups_ = p.groups();
  codes_ = padded(p.codes);
  indices_ = padded(p.indices);
  scales_.resize(p.scales.size());
  zeros_.resize(p.zeros.size());
  levels_.resize(p.codebook.size());
  for (std::size_t i = 0; i < levels_.size(); ++i) levels_[i] = f16_to_float(p.codebook[i]);
  for (std::size_t i = 0; i < scales_.size(); ++i) {
    const auto levels = level_map(p.bits, f16_to_float(p.scales[i]), p.zeros[i]);
    scales_[i] = levels.scale;
    zeros_[i] = levels.zero;
  }
  if (sparsity_.kind == SparsityPattern::Kind::kNOfM)
    index_bits_ = std::bit_width(static_cast<unsigned>(sparsity_.m - 1));
  if (sparsity_.kind == SparsityPattern::Kind::kUnstructured) {
    row_code_bit_.resize(static_cast<std::size_t>(rows_) + 1, 0);
    for (std::int64_t o = 0; o < rows_; ++o) {
      std::uint64_t kept = 0;
      for (std::int64_t c = 0; c < cols_; ++c)
        kept += read_bits(indices_.data(), static_cast<std::uint64_t>(o * cols_ + c), 1);
      row_code_bit_[static_cast<std::size_t>(o) + 1] =
          row_code_bit_[static_cast<std::size_t>(o)] + kept * static_cast<std::uint64_t>(bits_);
    }
  }
  if (fused_2of4()) distinct_positions_ = order_groups_by_column();
}

// Puts each 2:4 group's two codes in column order and says whether every
// group names two different columns. The AVX-512 kernels hand a group's two
// codes to its kept lanes in lane order, so the first must be the lower
// column's; the packer writes them so, a file may not, and swapping a
// group's two codes and two positions keeps its meaning for every kernel.
// A group that names one position twice (never written by the packer, but
// readable from a file) sums both in the portable kernels only, as the
// vector kernels place each kept weight in its own lane.
bool SbmmMatrix::order_groups_by_column() {
  const std::size_t position_bytes = static_cast<std::size_t>(rows_ * cols_ / 8);
  const unsigned code_mask = (1u << bits_) - 1u;
  bool distinct = true;
  for (std::size_t i = 0; i < position_bytes; ++i)
    for (int half = 0; half < 2; ++half) {
      const unsigned nibble = (indices_[i] >> (4 * half)) & 15u, first = nibble & 3u, second = nibble >> 2;
      if (first == second) distinct = false;
      if (first <= second) continue;
      indices_[i] =
          static_cast<std::uint8_t>((indices_[i] & ~(15u << (4 * half))) | (second | first << 2) << (4 * half));
      // Group g = 2i + half owns code slots 2g and 2g + 1 of the matrix's
      // stream (every row's codes start on a byte: cols is a multiple of 8),
      // which share one byte at 2 or 4 bits each.
      const std::uint64_t bit = (2 * i + static_cast<std::size_t>(half)) * 2 * static_cast<std::uint64_t>(bits_);
      std::uint8_t& byte = codes_[bit / 8];
      const unsigned shift = bit % 8, a = (byte >> shift) & code_mask, b = (byte >> (shift + bits_)) & code_mask;
      byte =
          static_cast<std::uint8_t>((byte & ~((code_mask | code_mask << bits_) << shift)) | (b | a << bits_) << shift);
    }
  return distinct;
}

void SbmmMatrix::use_vector_kernels(bool enabled) { vector_kernels_enabled = enabled; }

bool SbmmMatrix::vector_kernels() { return vector_kernels_enabled && x86::avx2_available(); }

void SbmmMatrix::use_avx512(bool enabled) { avx512_wanted = enabled; }

bool SbmmMatrix::avx512_in_use() { return vector_kernels() && avx512_wanted && x86::avx512_available(); }

bool SbmmMatrix::vectorised() const { return fused_2of4() && distinct_positions_ && vector_kernels(); }

bool SbmmMatrix::fused_2of4() const {
  return sparsity_.kind == SparsityPattern::Kind::kNOfM && sparsity_.m == 4 && sparsity_.n == 2 && groups_ == 1 &&
         (bits_ == 2 || bits_ == 4) && cols_ % 8 == 0 && levels_.empty();
}

SbmmLayout SbmmMatrix::layout() const {
  SbmmLayout l;
  l.rows = rows_;
  l.cols = cols_;
  l.group_size = group_size_;
  l.groups = groups_;
  l.bits = bits_;
  l.kind = sparsity_.kind == SparsityPattern::Kind::kDense  ? SbmmLayout::kDense
           : sparsity_.kind == SparsityPattern::Kind::kNOfM ? SbmmLayout::kNOfM
                                                            : SbmmLayout::kUnstructured;
  l.n = sparsity_.n;
  l.m = sparsity_.m;
  l.index_bits = index_bits_;
  l.codes = codes_.data();
  l.code_bytes = codes_.size();
  l.indices = indices_.data();
  l.index_bytes = indices_.size();
  l.scales = scales_.empty() ? nullptr : scales_.data();
  l.zeros = zeros_.empty() ? nullptr : zeros_.data();
  l.levels = levels_.empty() ? nullptr : levels_.data();
  l.row_code_bit = row_code_bit_.empty() ? nullptr : row_code_bit_.data();
  return l;
}

std::uint64_t SbmmMatrix::bytes() const {
  return codes_.size() + indices_.size() + (scales_.size() + zeros_.size() + levels_.size()) * sizeof(float) +
         row_code_bit_.size() * sizeof(std::uint64_t);
}

namespace {

// The `count` codes of `bits` bits starting at bit `bit` of an LSB-first
// stream, one per byte of `out`. Byte-aligned 1/2/4/8-bit streams (the
// common case: a row of 2:4 codes at 2 or 4 bits) take shift-and-mask loops
// the compiler vectorises; anything else reads 64-bit windows.
template <int Bits>
void unpack_aligned(const std::uint8_t* in, std::int64_t count, std::uint8_t* out) {
  constexpr int kPerByte = 8 / Bits;
  constexpr unsigned kMask = (1u << Bits) - 1;
  const std::int64_t whole = count / kPerByte;
  for (std::int64_t i = 0; i < whole; ++i) {
    const unsigned byte = in[i];
    for (int k = 0; k < kPerByte; ++k) out[i * kPerByte + k] = static_cast<std::uint8_t>((byte >> (k * Bits)) & kMask);
  }
  for (std::int64_t i = whole * kPerByte; i < count; ++i)
    out[i] = static_cast<std::uint8_t>((in[i / kPerByte] >> ((i % kPerByte) * Bits)) & kMask);
}

void unpack_codes(const std::uint8_t* data, std::uint64_t bit, std::int64_t count, int bits, std::uint8_t* out) {
  if (bit % 8 == 0) {
    const std::uint8_t* in = data + bit / 8;
    switch (bits) {
      case 1:
        return unpack_aligned<1>(in, count, out);
      case 2:
        return unpack_aligned<2>(in, count, out);
      case 4:
        return unpack_aligned<4>(in, count, out);
      case 8:
        return unpack_aligned<8>(in, count, out);
      default:
        break;
    }
  }
  for (std::int64_t i = 0; i < count; ++i, bit += static_cast<std::uint64_t>(bits))
    out[i] = static_cast<std::uint8_t>(read_bits(data, bit, bits));
}

}  // namespace

std::int64_t SbmmMatrix::kept_row(std::int64_t o, float* values, std::int32_t* columns) const {
  thread_local std::vector<std::uint8_t> codes, positions;
  std::int64_t kept = cols_;
  std::uint64_t code_bit = 0;
  switch (sparsity_.kind) {
    case SparsityPattern::Kind::kDense:
      code_bit = static_cast<std::uint64_t>(o * cols_) * static_cast<std::uint64_t>(bits_);
      for (std::int64_t c = 0; c < cols_; ++c) columns[c] = static_cast<std::int32_t>(c);
      break;
    case SparsityPattern::Kind::kNOfM: {
      const std::int64_t m = sparsity_.m, keep = sparsity_.kept_per_group();
      kept = (cols_ / m) * keep;
      code_bit = static_cast<std::uint64_t>(o * kept) * static_cast<std::uint64_t>(bits_);
      positions.resize(static_cast<std::size_t>(kept));
      unpack_codes(indices_.data(), static_cast<std::uint64_t>(o * kept) * static_cast<std::uint64_t>(index_bits_),
                   kept, index_bits_, positions.data());
      const std::uint8_t* pos = positions.data();
      if (m == 4 && keep == 2) {  // 2:4, the common case, without the inner loop
        for (std::int64_t g = 0; g < kept / 2; ++g) {
          columns[2 * g] = static_cast<std::int32_t>(4 * g + (pos[2 * g] & 3));
          columns[2 * g + 1] = static_cast<std::int32_t>(4 * g + (pos[2 * g + 1] & 3));
        }
      } else {
        for (std::int64_t k = 0; k < kept; ++k)  // validated containers keep positions below m
          columns[k] = static_cast<std::int32_t>((k / keep) * m + std::min<std::int64_t>(pos[k], m - 1));
      }
      break;
    }
    case SparsityPattern::Kind::kUnstructured: {
      code_bit = row_code_bit_[static_cast<std::size_t>(o)];
      kept = static_cast<std::int64_t>((row_code_bit_[static_cast<std::size_t>(o) + 1] - code_bit) /
                                       static_cast<std::uint64_t>(bits_));
      positions.resize(static_cast<std::size_t>(cols_));
      unpack_codes(indices_.data(), static_cast<std::uint64_t>(o * cols_), cols_, 1, positions.data());
      std::int64_t k = 0;
      for (std::int64_t c = 0; c < cols_ && k < kept; ++c)
        if (positions[static_cast<std::size_t>(c)]) columns[k++] = static_cast<std::int32_t>(c);
      kept = k;
      break;
    }
  }
  codes.resize(static_cast<std::size_t>(kept));
  unpack_codes(codes_.data(), code_bit, kept, bits_, codes.data());
  const std::uint8_t* q = codes.data();
  if (!levels_.empty()) {
    const float* table = levels_.data() + ((o * groups_) << bits_);
    if (groups_ == 1) {
      for (std::int64_t k = 0; k < kept; ++k) values[k] = table[q[k]];
    } else {
      for (std::int64_t k = 0; k < kept; ++k) values[k] = table[((columns[k] / group_size_) << bits_) + q[k]];
    }
    return kept;
  }
  const float* scale = scales_.data() + o * groups_;
  const float* zero = zeros_.data() + o * groups_;
  if (groups_ == 1) {
    // One scale per row: a table of the 2^bits values replaces a multiply per weight.
    float table[256];
    const int levels = 1 << bits_;
    for (int v = 0; v < levels; ++v) table[v] = scale[0] * (static_cast<float>(v) - zero[0]);
    for (std::int64_t k = 0; k < kept; ++k) values[k] = table[q[k]];
  } else {
    for (std::int64_t k = 0; k < kept; ++k) {
      const auto g = columns[k] / group_size_;
      values[k] = scale[g] * (static_cast<float>(q[k]) - zero[g]);
    }
  }
  return kept;
}

void SbmmMatrix::decode_row(std::int64_t o, float* out) const {
  thread_local std::vector<float> values;
  thread_local std::vector<std::int32_t> columns;
  values.resize(static_cast<std::size_t>(cols_));
  columns.resize(static_cast<std::size_t>(cols_));
  const auto kept = kept_row(o, values.data(), columns.data());
  std::fill(out, out + cols_, 0.0f);
  for (std::int64_t k = 0; k < kept; ++k)
    out[columns[static_cast<std::size_t>(k)]] = values[static_cast<std::size_t>(k)];
}

void SbmmMatrix::decode_rows(std::int64_t begin, std::int64_t end, float* out, const float* plus) const {
  if (vectorised()) {
    if (avx512_in_use()) return x86::decode_rows_2of4_avx512(layout(), begin, end, out, plus);
    return x86::decode_rows_2of4_avx2(layout(), begin, end, out, plus);
  }
  for (std::int64_t o = begin; o < end; ++o) {
    float* row = out + (o - begin) * cols_;
    decode_row(o, row);
    if (plus == nullptr) continue;
    const float* p = plus + (o - begin) * cols_;
    for (std::int64_t i = 0; i < cols_; ++i) row[i] += p[i];
  }
}

namespace {

// The fused path for the most common form, 2:4 with one scale per row at 2
// or 4 bits: reads a group's two positions and two codes straight from the
// packed bytes and multiplies as it goes, touching nothing but the packed
// row, a 16-entry table and x. One input row; two partial sums (first and
// second kept weight of each group) make two independent chains, added in a
// fixed order at the end.
template <int Bits>
float multiply_2of4_x1(const std::uint8_t* codes, const std::uint8_t* positions, std::int64_t groups,
                       const float* table, const float* x) {
  float even = 0, odd = 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    const unsigned where = (positions[g >> 1] >> ((g & 1) * 4)) & 15u;  // two 2-bit positions
    const unsigned what = Bits == 4 ? codes[g] : (codes[g >> 1] >> ((g & 1) * 4)) & 15u;
    const float v0 = table[what & ((1u << Bits) - 1)], v1 = table[what >> Bits];
    even += v0 * x[4 * g + (where & 3u)];
    odd += v1 * x[4 * g + (where >> 2)];
  }
  return even + odd;
}

// Four input rows at once: x transposed to [cols][4], so that one vector of
// four lanes holds column c of every row and each kept weight costs one
// vector multiply and add. Lane r computes exactly what the one-row kernel
// computes for row r, in the same order.
template <int Bits>
void multiply_2of4_x4(const std::uint8_t* codes, const std::uint8_t* positions, std::int64_t groups, const float* table,
                      const float* xt, float* sums) {
  typedef float v4 __attribute__((vector_size(16)));
  v4 even = {0, 0, 0, 0}, odd = {0, 0, 0, 0};
  for (std::int64_t g = 0; g < groups; ++g) {
    const unsigned where = (positions[g >> 1] >> ((g & 1) * 4)) & 15u;
    const unsigned what = Bits == 4 ? codes[g] : (codes[g >> 1] >> ((g & 1) * 4)) & 15u;
    const float v0 = table[what & ((1u << Bits) - 1)], v1 = table[what >> Bits];
    const std::int64_t c0 = 4 * g + (where & 3u), c1 = 4 * g + (where >> 2);
    v4 a, b;
    std::memcpy(&a, xt + 4 * c0, sizeof a);
    std::memcpy(&b, xt + 4 * c1, sizeof b);
    even += v0 * a;
    odd += v1 * b;
  }
  const v4 total = even + odd;
  std::memcpy(sums, &total, sizeof total);
}

}  // namespace

void SbmmMatrix::multiply_add(const float* x, std::int64_t n, std::int64_t x_stride, float* y, std::int64_t y_stride,
                              std::int64_t row_begin, std::int64_t row_end) const {
  if (row_begin < 0 || row_end > rows_ || row_begin > row_end)
    throw UsageError("multiply_add: row range out of bounds");
  if (vectorised()) {
    if (avx512_in_use())
      return x86::multiply_add_2of4_avx512(layout(), x, n, x_stride, y, y_stride, row_begin, row_end);
    return x86::multiply_add_2of4_avx2(layout(), x, n, x_stride, y, y_stride, row_begin, row_end);
  }
  if (fused_2of4()) {
    // Rows of 2:4 start on byte boundaries: cols/2 kept weights, cols/8 bytes
    // of positions, cols/2 * bits / 8 bytes of codes.
    const std::int64_t groups = cols_ / 4, position_bytes = cols_ / 8, code_bytes = cols_ / 2 * bits_ / 8;
    auto table_of = [&](std::int64_t o, float* table) {
      for (int v = 0; v < (1 << bits_); ++v)
        table[v] = scales_[static_cast<std::size_t>(o)] * (static_cast<float>(v) - zeros_[static_cast<std::size_t>(o)]);
    };
    if (n == 1) {
      for (std::int64_t o = row_begin; o < row_end; ++o) {
        float table[16];
        table_of(o, table);
        const std::uint8_t* codes = codes_.data() + o * code_bytes;
        const std::uint8_t* positions = indices_.data() + o * position_bytes;
        y[o] += bits_ == 4 ? multiply_2of4_x1<4>(codes, positions, groups, table, x)
                           : multiply_2of4_x1<2>(codes, positions, groups, table, x);
      }
      return;
    }
    thread_local std::vector<float> xt;
    xt.resize(static_cast<std::size_t>(cols_ * 4));
    for (std::int64_t r0 = 0; r0 < n; r0 += 4) {
      const int rows = static_cast<int>(std::min<std::int64_t>(4, n - r0));
      for (std::int64_t c = 0; c < cols_; ++c)
        for (int r = 0; r < 4; ++r)
          xt[static_cast<std::size_t>(4 * c + r)] = r < rows ? x[(r0 + r) * x_stride + c] : 0.0f;
      for (std::int64_t o = row_begin; o < row_end; ++o) {
        float table[16], sums[4];
        table_of(o, table);
        const std::uint8_t* codes = codes_.data() + o * code_bytes;
        const std::uint8_t* positions = indices_.data() + o * position_bytes;
        if (bits_ == 4)
          multiply_2of4_x4<4>(codes, positions, groups, table, xt.data(), sums);
        else
          multiply_2of4_x4<2>(codes, positions, groups, table, xt.data(), sums);
        for (int r = 0; r < rows; ++r) y[(r0 + r) * y_stride + o] += sums[r];
      }
    }
    return;
  }
  thread_local std::vector<float> values;
  thread_local std::vector<std::int32_t> columns;
  values.resize(static_cast<std::size_t>(cols_));
  columns.resize(static_cast<std::size_t>(cols_));
  for (std::int64_t o = row_begin; o < row_end; ++o) {
    const auto kept = kept_row(o, values.data(), columns.data());
    const float* v = values.data();
    const std::int32_t* c = columns.data();
    for (std::int64_t r = 0; r < n; ++r) {
      // Only the kept weights: a gather from x, four partial sums in a fixed order.
      const float* xr = x + r * x_stride;
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      std::int64_t k = 0;
      for (; k + 4 <= kept; k += 4) {
        s0 += v[k] * xr[c[k]];
        s1 += v[k + 1] * xr[c[k + 1]];
        s2 += v[k + 2] * xr[c[k + 2]];
        s3 += v[k + 3] * xr[c[k + 3]];
      }
      for (; k < kept; ++k) s0 += v[k] * xr[c[k]];
      y[r * y_stride + o] += (s0 + s1) + (s2 + s3);
    }
  }
}

}  // namespace fleet::deltazip
