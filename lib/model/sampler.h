// Choosing the next token from logits: greedy, or sampled with temperature,
// top-k and top-p (nucleus), reproducibly from a seed. No libtorch.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace fleet::model {

struct SamplingOptions {
  double temperature = 0.0;  ///< 0: greedy (argmax)
  std::int64_t top_k = 0;    ///< keep the k most likely tokens (0: all)
  double top_p = 1.0;        ///< keep the smallest set whose probability reaches p
  std::uint64_t seed = 0;

  /// UsageError for a negative temperature or top_k, or top_p outside (0, 1].
  void validate() const;
};

/// Draws tokens for one sequence; each sequence gets its own sampler so that
/// results do not depend on which other sequences share its batch.
class TokenSampler {
 public:
  TokenSampler(const SamplingOptions& options, std::uint64_t stream);

  /// The next token for `logits` (one score per vocabulary entry).
  std::int64_t next(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace fleet::model
