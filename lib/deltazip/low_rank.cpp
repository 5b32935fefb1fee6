#include "deltazip/low_rank.h"

#include <algorithm>
#include <vector>

#include "common/error.h"

namespace fleet::deltazip {

std::uint64_t LowRankMatrix::stored_bytes() const { return up.stored_bytes() + down.stored_bytes(); }

double LowRankMatrix::bits_per_weight() const {
  const auto weights = rows() * cols();
  return weights <= 0 ? 0.0 : 8.0 * static_cast<double>(stored_bytes()) / static_cast<double>(weights);
}

void LowRankMatrix::validate(const std::string& name) const {
  up.validate(name + " (up factor)");
  down.validate(name + " (down factor)");
  auto fail = [&](const std::string& why) { throw InputError(name + ": " + why); };
  if (up.cols != down.rows)
    fail("the up factor has " + std::to_string(up.cols) + " columns, the down factor " + std::to_string(down.rows) +
         " rows");
  for (const PackedMatrix* f : {&up, &down})
    if (f->sparsity.kind != SparsityPattern::Kind::kDense || f->has_codebook())
      fail("a low-rank factor must be dense on an affine grid");
}

void unpack_low_rank(const LowRankMatrix& m, std::span<float> out) {
  const auto rows = m.rows(), cols = m.cols(), rank = m.rank();
  if (out.size() != static_cast<std::size_t>(rows * cols)) throw InputError("output must hold rows x cols values");
  std::vector<float> up(static_cast<std::size_t>(rows * rank)), down(static_cast<std::size_t>(rank * cols));
  unpack_matrix(m.up, up);
  unpack_matrix(m.down, down);
  // Row by row, the rank's terms added in order: out[o, :] = Σ_k up[o, k] down[k, :].
  for (std::int64_t o = 0; o < rows; ++o) {
    float* row = out.data() + o * cols;
    std::fill(row, row + cols, 0.0f);
    for (std::int64_t k = 0; k < rank; ++k) {
      const float a = up[static_cast<std::size_t>(o * rank + k)];
      const float* d = down.data() + k * cols;
      for (std::int64_t c = 0; c < cols; ++c) row[c] += a * d[c];
    }
  }
}

}  // namespace fleet::deltazip
