#include "deltazip/packing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>

#include "common/error.h"
#include "common/half.h"

namespace fleet::deltazip {
namespace {

int index_bits(int m) { return std::bit_width(static_cast<unsigned>(m - 1)); }

}  // namespace

std::vector<std::uint8_t> pack_bits(std::span<const std::uint8_t> codes, int bits) {
  if (bits < 1 || bits > 8) throw UsageError("codes must have 1 to 8 bits");
  std::vector<std::uint8_t> out((codes.size() * static_cast<std::size_t>(bits) + 7) / 8, 0);
  std::size_t bit = 0;
  for (auto c : codes) {
    unsigned value = c & ((1u << bits) - 1);
    for (int k = 0; k < bits; ++k, ++bit)
      if (value >> k & 1u) out[bit / 8] |= static_cast<std::uint8_t>(1u << (bit % 8));
  }
  return out;
}

std::vector<std::uint8_t> unpack_bits(std::span<const std::uint8_t> packed, int bits, std::size_t count) {
  if (bits < 1 || bits > 8) throw UsageError("codes must have 1 to 8 bits");
  if (packed.size() * 8 < count * static_cast<std::size_t>(bits))
    throw InputError("packed data holds " + std::to_string(packed.size()) + " bytes, fewer than " +
                     std::to_string(count) + " codes of " + std::to_string(bits) + " bits need");
  std::vector<std::uint8_t> out(count);
  std::size_t bit = 0;
  for (std::size_t i = 0; i < count; ++i) {
    unsigned value = 0;
    for (int k = 0; k < bits; ++k, ++bit) value |= static_cast<unsigned>(packed[bit / 8] >> (bit % 8) & 1u) << k;
    out[i] = static_cast<std::uint8_t>(value);
  }
  return out;
}

SparsityPattern SparsityPattern::parse(const std::string& text) {
  SparsityPattern p;
  if (text == "none" || text == "0") return p;
  auto colon = text.find(':');
  if (colon != std::string::npos) {
    char* end = nullptr;
    p.n = static_cast<int>(std::strtol(text.c_str(), &end, 10));
    p.m = static_cast<int>(std::strtol(text.c_str() + colon + 1, &end, 10));
    if (*end != '\0' || p.n <= 0 || p.m <= p.n || p.m > 16)
      throw UsageError("sparsity '" + text + "': expected N:M with 0 < N < M <= 16, e.g. 2:4");
    p.kind = Kind::kNOfM;
    return p;
  }
  char* end = nullptr;
  p.fraction = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(p.fraction > 0 && p.fraction < 1))
    throw UsageError("sparsity '" + text + "': expected none, N:M (e.g. 2:4) or a fraction in (0, 1)");
  p.kind = Kind::kUnstructured;
  return p;
}

std::string SparsityPattern::to_string() const {
  switch (kind) {
    case Kind::kDense:
      return "none";
    case Kind::kNOfM:
      return std::to_string(n) + ":" + std::to_string(m);
    case Kind::kUnstructured: {
      std::string s = std::to_string(fraction);
      while (s.size() > 3 && s.back() == '0') s.pop_back();
      return s;
    }
  }
  return "none";
}

std::uint64_t PackedMatrix::stored_bytes() const {
  return codes.size() + indices.size() + scales.size() * 2 + zeros.size() + codebook.size() * 2;
}

double PackedMatrix::bits_per_weight() const {
  return rows * cols == 0 ? 0.0 : 8.0 * static_cast<double>(stored_bytes()) / static_cast<double>(rows * cols);
}

namespace {

std::size_t kept_count(const PackedMatrix& p, std::span<const std::uint8_t> mask) {
  switch (p.sparsity.kind) {
    case SparsityPattern::Kind::kDense:
      return static_cast<std::size_t>(p.rows * p.cols);
    case SparsityPattern::Kind::kNOfM:
      return static_cast<std::size_t>(p.rows * (p.cols / p.sparsity.m) * p.sparsity.kept_per_group());
    case SparsityPattern::Kind::kUnstructured: {
      std::size_t n = 0;
      for (auto v : mask) n += v;
      return n;
    }
  }
  return 0;
}

}  // namespace

void PackedMatrix::validate(const std::string& name) const {
  auto fail = [&](const std::string& why) { throw InputError(name + ": " + why); };
  // Packed arrays hold exactly the bits they need, rounded up to whole bytes.
  auto expect_bytes = [&](const char* what, std::size_t bytes, std::size_t bits_needed) {
    const std::size_t needed = (bits_needed + 7) / 8;
    if (bytes != needed) {
      fail(std::string(what) + " hold " + std::to_string(bytes) + " bytes, expected " + std::to_string(needed));
    }
  };
  if (rows <= 0 || cols <= 0) fail("empty shape");
  if (bits < 1 || bits > 8) fail("bits must be 1 to 8, got " + std::to_string(bits));
  if (group_size <= 0) fail("group size must be positive");
  const auto expected_groups = static_cast<std::size_t>(rows * groups());
  if (has_codebook()) {
    if (codebook.size() != expected_groups << bits)
      fail("has a codebook of " + std::to_string(codebook.size()) + " levels for " + std::to_string(expected_groups) +
           " groups of " + std::to_string(1 << bits));
    if (!scales.empty() || !zeros.empty()) fail("has both a codebook and scales");
  } else if (scales.size() != expected_groups || zeros.size() != expected_groups) {
    fail("has " + std::to_string(scales.size()) + " scales for " + std::to_string(expected_groups) + " groups");
  }
  if (bits == 1 && std::any_of(zeros.begin(), zeros.end(), [](std::uint8_t z) { return z != 0; }))
    fail("1-bit codes are the sign grid, but a zero point is not 0");
  std::vector<std::uint8_t> mask;
  if (sparsity.kind == SparsityPattern::Kind::kNOfM) {
    if (cols % sparsity.m != 0) fail("columns are not a multiple of the n:m group");
    const auto kept = static_cast<std::size_t>(rows * (cols / sparsity.m) * sparsity.kept_per_group());
    expect_bytes("n:m indices", indices.size(), kept * static_cast<std::size_t>(index_bits(sparsity.m)));
  } else if (sparsity.kind == SparsityPattern::Kind::kUnstructured) {
    expect_bytes("sparsity bitmask", indices.size(), static_cast<std::size_t>(rows * cols));
    mask = unpack_bits(indices, 1, static_cast<std::size_t>(rows * cols));
  } else if (!indices.empty()) {
    fail("a dense matrix has no sparsity indices");
  }
  expect_bytes("codes", codes.size(), kept_count(*this, mask) * static_cast<std::size_t>(bits));
}

namespace {
// An affine grid of 2-8 bits whose zero points are all codes: value
// scale * (code - zero) is exactly 0 at code == zero.
bool folds_into_codes(const PackedMatrix& p) {
  if (p.bits < 2 || p.has_codebook() || p.zeros.empty()) return false;
  const int top = (1 << p.bits) - 1;
  return std::all_of(p.zeros.begin(), p.zeros.end(), [&](std::uint8_t z) { return z <= top; });
}
}  // namespace

PackedMatrix pack_matrix(std::int64_t rows, std::int64_t cols, int bits, std::int64_t group_size,
                         const SparsityPattern& sparsity, std::span<const std::uint8_t> codes,
                         std::span<const std::uint8_t> kept, std::vector<std::uint16_t> scales,
                         std::vector<std::uint8_t> zeros, std::vector<std::uint16_t> codebook) {
  PackedMatrix p;
  p.rows = rows;
  p.cols = cols;
  p.bits = bits;
  p.group_size = group_size <= 0 ? cols : group_size;
  p.sparsity = sparsity;
  p.scales = std::move(scales);
  p.zeros = std::move(zeros);
  p.codebook = std::move(codebook);
  const auto total = static_cast<std::size_t>(rows * cols);
  if (codes.size() != total || kept.size() != total) throw InputError("codes and mask must hold rows x cols entries");
  std::vector<std::uint8_t> stored, positions;
  stored.reserve(total);
  if (sparsity.kind == SparsityPattern::Kind::kUnstructured && folds_into_codes(p)) {
    // Every group's grid has an exact zero (code == zero point): a pruned
    // weight is stored as that code, and no mask is needed. The mask would
    // cost about H(fraction) bits per weight on top of codes that already
    // hold zeros where rounding put them.
    const std::int64_t groups = p.groups();
    for (std::size_t i = 0; i < total; ++i) {
      const auto row = static_cast<std::int64_t>(i) / cols, col = static_cast<std::int64_t>(i) % cols;
      stored.push_back(kept[i] ? codes[i] : p.zeros[static_cast<std::size_t>(row * groups + col / p.group_size)]);
    }
    p.sparsity = SparsityPattern{};
    p.codes = pack_bits(stored, bits);
    p.validate("matrix");
    return p;
  }
  switch (sparsity.kind) {
    case SparsityPattern::Kind::kDense:
      stored.assign(codes.begin(), codes.end());
      break;
    case SparsityPattern::Kind::kUnstructured:
      for (std::size_t i = 0; i < total; ++i)
        if (kept[i]) stored.push_back(codes[i]);
      p.indices = pack_bits(kept, 1);
      break;
    case SparsityPattern::Kind::kNOfM: {
      const int m = sparsity.m;
      if (cols % m != 0)
        throw InputError("n:m sparsity needs the columns (" + std::to_string(cols) + ") to be a multiple of " +
                         std::to_string(m));
      for (std::size_t g = 0; g < total; g += static_cast<std::size_t>(m)) {
        int n_kept = 0;
        for (int k = 0; k < m; ++k) {
          if (!kept[g + static_cast<std::size_t>(k)]) continue;
          stored.push_back(codes[g + static_cast<std::size_t>(k)]);
          positions.push_back(static_cast<std::uint8_t>(k));
          ++n_kept;
        }
        if (n_kept != sparsity.kept_per_group())
          throw InputError("a group of " + std::to_string(m) + " keeps " + std::to_string(n_kept) + " weights, " +
                           sparsity.to_string() + " keeps " + std::to_string(sparsity.kept_per_group()));
      }
      p.indices = pack_bits(positions, index_bits(m));
      break;
    }
  }
  p.codes = pack_bits(stored, bits);
  p.validate("matrix");
  return p;
}

void unpack_matrix(const PackedMatrix& p, std::span<float> out) {
  const auto total = static_cast<std::size_t>(p.rows * p.cols);
  if (out.size() != total) throw InputError("output must hold rows x cols values");
  std::vector<std::uint8_t> mask;
  if (p.sparsity.kind == SparsityPattern::Kind::kUnstructured) mask = unpack_bits(p.indices, 1, total);
  const auto codes = unpack_bits(p.codes, p.bits, kept_count(p, mask));
  std::vector<LevelMap> levels(p.scales.size());
  for (std::size_t i = 0; i < levels.size(); ++i) levels[i] = level_map(p.bits, f16_to_float(p.scales[i]), p.zeros[i]);
  std::vector<float> codebook(p.codebook.size());
  for (std::size_t i = 0; i < codebook.size(); ++i) codebook[i] = f16_to_float(p.codebook[i]);
  const auto groups = static_cast<std::size_t>(p.groups());
  auto value = [&](std::size_t index, std::uint8_t code) {
    const std::size_t row = index / static_cast<std::size_t>(p.cols), col = index % static_cast<std::size_t>(p.cols);
    const std::size_t g = row * groups + col / static_cast<std::size_t>(p.group_size);
    if (!codebook.empty()) return codebook[(g << p.bits) + code];
    return levels[g].scale * (static_cast<float>(code) - levels[g].zero);
  };
  std::fill(out.begin(), out.end(), 0.0f);
  std::size_t next = 0;
  switch (p.sparsity.kind) {
    case SparsityPattern::Kind::kDense:
      for (std::size_t i = 0; i < total; ++i) out[i] = value(i, codes[i]);
      break;
    case SparsityPattern::Kind::kUnstructured:
      for (std::size_t i = 0; i < total; ++i)
        if (mask[i]) out[i] = value(i, codes[next++]);
      break;
    case SparsityPattern::Kind::kNOfM: {
      const auto m = static_cast<std::size_t>(p.sparsity.m),
                 keep = static_cast<std::size_t>(p.sparsity.kept_per_group());
      const auto positions = unpack_bits(p.indices, index_bits(p.sparsity.m), codes.size());
      for (std::size_t g = 0; g < total; g += m)
        for (std::size_t k = 0; k < keep; ++k, ++next) {
          if (positions[next] >= m) throw InputError("n:m index out of range");
          out[g + positions[next]] = value(g + positions[next], codes[next]);
        }
      break;
    }
  }
}

}  // namespace fleet::deltazip
