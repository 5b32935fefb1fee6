// Choosing the next token from logits: greedy, or sampled with temperature,
// top-k and top-p (nucleus), reproducibly from a seed. No libtorch.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fleet::model {

struct SamplingOptions {
  double temperature = 0.0;  ///< 0: greedy (argmax)
  std::int64_t top_k = 0;    ///< keep the k most likely tokens (0: all)
  double top_p = 1.0;        ///< keep the smallest set whose probability reaches p
  std::uint64_t seed = 0;
  /// OpenAI's penalties on tokens this sampler has already produced: a
  /// token's logit drops by frequency_penalty x its count and by
  /// presence_penalty once it has appeared (-2 to 2; negative favours repeats).
  double frequency_penalty = 0.0, presence_penalty = 0.0;
  /// Added to the logit of each listed token id before choosing (-100 to 100:
  /// -100 in effect bans a token, 100 all but forces it).
  std::vector<std::pair<std::int64_t, float>> logit_bias;

  /// UsageError for a negative temperature or top_k, top_p outside (0, 1], a
  /// penalty outside [-2, 2] or a bias outside [-100, 100] or on a negative id.
  void validate() const;
};

/// Draws tokens for one sequence; each sequence gets its own sampler so that
/// results do not depend on which other sequences share its batch.
class TokenSampler {
 public:
  TokenSampler(const SamplingOptions& options, std::uint64_t stream);

  /// The next token for `logits` (one score per vocabulary entry); bias ids
  /// beyond the vocabulary are ignored (check them against it first).
  std::int64_t next(std::span<const float> logits);

 private:
  std::int64_t choose(std::span<const float> logits);

  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::unordered_map<std::int64_t, int> produced_;  ///< token -> times produced (for the penalties)
  std::vector<float> adjusted_;                     ///< logits after bias and penalties
  std::vector<double> weights_;                     ///< exp((logit - max) / temperature), plain sampling
  std::vector<std::int64_t> order_;                 ///< token ids, most likely first (top-k, top-p)
};

/// A token's log-probability under the model's distribution (log-softmax of
/// the raw logits, before temperature, penalties or bias), and the most
/// likely tokens' (OpenAI's logprobs).
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<std::int64_t, float>> top;  ///< most likely first (ties: lower id first)
};

/// Log-probabilities of `token` and of the `top` most likely tokens under `logits`.
TokenLogprobs token_logprobs(std::span<const float> logits, std::int64_t token, std::size_t top);

}  // namespace fleet::model
