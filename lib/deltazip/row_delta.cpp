#include "deltazip/row_delta.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/half.h"
#include "deltazip/packing.h"

namespace fleet::deltazip {
namespace {

int max_level(int bits) { return (1 << (bits - 1)) - 1; }

}  // namespace

std::uint64_t RowDelta::stored_bytes() const {
  return kept_rows.size() * sizeof(std::int32_t) + codes.size() + scales.size() * sizeof(std::uint16_t);
}

void RowDelta::validate(const std::string& name) const {
  auto fail = [&](const std::string& why) { throw InputError(name + ": " + why); };
  if (bits < 2 || bits > 8) fail("row delta bits " + std::to_string(bits) + " outside 2..8");
  if (rows <= 0 || cols <= 0) fail("row delta shape must be positive");
  if (static_cast<std::int64_t>(kept_rows.size()) > rows) fail("more kept rows than the tensor has");
  for (std::size_t i = 0; i < kept_rows.size(); ++i) {
    if (kept_rows[i] < 0 || kept_rows[i] >= rows)
      fail("kept row " + std::to_string(kept_rows[i]) + " outside the tensor");
    if (i > 0 && kept_rows[i] <= kept_rows[i - 1]) fail("kept rows are not strictly increasing");
  }
  if (scales.size() != kept_rows.size()) fail("one scale per kept row expected");
  const auto values = static_cast<std::uint64_t>(kept_rows.size()) * static_cast<std::uint64_t>(cols);
  if (codes.size() != (values * static_cast<std::uint64_t>(bits) + 7) / 8) fail("codes do not match the kept rows");
}

RowDelta encode_row_delta(std::span<const float> delta, std::int64_t rows, std::int64_t cols, int bits) {
  if (bits < 2 || bits > 8) throw UsageError("row delta bits must be 2 to 8");
  if (rows <= 0 || cols <= 0 || static_cast<std::int64_t>(delta.size()) != rows * cols)
    throw UsageError("row delta: data does not match its shape");
  const int top = max_level(bits);
  std::vector<float> row_max(static_cast<std::size_t>(rows), 0.0f);
  float all_max = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c)
      row_max[r] = std::max(row_max[r], std::fabs(delta[static_cast<std::size_t>(r * cols + c)]));
    all_max = std::max(all_max, row_max[r]);
  }
  RowDelta out;
  out.rows = rows;
  out.cols = cols;
  out.bits = bits;
  const float drop_below = all_max / (2.0f * static_cast<float>(top));
  std::vector<std::uint8_t> levels;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (!(row_max[r] >= drop_below) || row_max[r] == 0) continue;
    // The scale is rounded to float16 first, so that encoding and decoding use the same one.
    const std::uint16_t scale_bits = float_to_f16(row_max[r] / static_cast<float>(top));
    const float scale = f16_to_float(scale_bits);
    if (!(scale > 0)) continue;  // below float16's range: the row is zero to this precision
    out.kept_rows.push_back(static_cast<std::int32_t>(r));
    out.scales.push_back(scale_bits);
    for (std::int64_t c = 0; c < cols; ++c) {
      const float q = std::nearbyint(delta[static_cast<std::size_t>(r * cols + c)] / scale);
      levels.push_back(static_cast<std::uint8_t>(std::clamp(static_cast<int>(q), -top, top) + (1 << (bits - 1))));
    }
  }
  out.codes = pack_bits(levels, bits);
  return out;
}

void decode_row_delta(const RowDelta& d, std::span<float> out) {
  d.validate("row delta");
  if (static_cast<std::int64_t>(out.size()) != d.rows * d.cols) throw UsageError("row delta: output size differs");
  std::fill(out.begin(), out.end(), 0.0f);
  const auto levels = unpack_bits(d.codes, d.bits, d.kept_rows.size() * static_cast<std::size_t>(d.cols));
  const int zero = 1 << (d.bits - 1);
  for (std::size_t k = 0; k < d.kept_rows.size(); ++k) {
    const float scale = f16_to_float(d.scales[k]);
    float* row = out.data() + static_cast<std::size_t>(d.kept_rows[k]) * static_cast<std::size_t>(d.cols);
    const std::uint8_t* code = levels.data() + k * static_cast<std::size_t>(d.cols);
    for (std::int64_t c = 0; c < d.cols; ++c) row[c] = scale * static_cast<float>(static_cast<int>(code[c]) - zero);
  }
}

}  // namespace fleet::deltazip
