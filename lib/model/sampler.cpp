#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/error.h"

namespace fleet::model {

void SamplingOptions::validate() const {
  if (!(temperature >= 0)) throw UsageError("temperature must be >= 0 (0 means greedy)");
  if (top_k < 0) throw UsageError("top-k must be >= 0 (0 means no limit)");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("top-p must be in (0, 1]");
  if (!(std::abs(frequency_penalty) <= 2) || !(std::abs(presence_penalty) <= 2))
    throw UsageError("frequency and presence penalties must be between -2 and 2");
  for (const auto& [id, bias] : logit_bias)
    if (id < 0 || !(std::abs(bias) <= 100)) throw UsageError("logit bias needs a token id >= 0 and a bias between -100 and 100");
}

TokenSampler::TokenSampler(const SamplingOptions& options, std::uint64_t stream)
    : options_(options), rng_(options.seed * 0x9E3779B97F4A7C15ull + stream) {
  options_.validate();
}

std::int64_t TokenSampler::next(std::span<const float> logits) {
  if (logits.empty()) throw InputError("cannot sample from empty logits");
  std::int64_t token;
  const bool penalised = options_.frequency_penalty != 0 || options_.presence_penalty != 0;
  if (!penalised && options_.logit_bias.empty()) {
    token = choose(logits);
  } else {
    adjusted_.assign(logits.begin(), logits.end());
    const auto vocab = static_cast<std::int64_t>(adjusted_.size());
    for (const auto& [id, bias] : options_.logit_bias)
      if (id < vocab) adjusted_[static_cast<std::size_t>(id)] += bias;
    for (const auto& [id, count] : produced_)
      if (id < vocab)
        adjusted_[static_cast<std::size_t>(id)] -= static_cast<float>(options_.frequency_penalty * count + options_.presence_penalty);
    token = choose(adjusted_);
  }
  if (penalised) ++produced_[token];
  return token;
}

std::int64_t TokenSampler::choose(std::span<const float> logits) {
  if (options_.temperature == 0.0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();  // first of ties
  std::vector<std::int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties by id so that the order never depends on the sort.
  auto by_score = [&](std::int64_t a, std::int64_t b) {
    return logits[static_cast<std::size_t>(a)] != logits[static_cast<std::size_t>(b)]
               ? logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)]
               : a < b;
  };
  std::size_t keep = order.size();
  if (options_.top_k > 0 && static_cast<std::size_t>(options_.top_k) < keep) {
    keep = static_cast<std::size_t>(options_.top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), by_score);
  } else {
    std::sort(order.begin(), order.end(), by_score);
  }
  const double top = logits[static_cast<std::size_t>(order[0])];
  std::vector<double> probs(keep);
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((logits[static_cast<std::size_t>(order[i])] - top) / options_.temperature);
    total += probs[i];
  }
  if (options_.top_p < 1.0) {
    double cumulative = 0;
    std::size_t n = 0;
    while (n < keep) {
      cumulative += probs[n++] / total;
      if (cumulative >= options_.top_p) break;
    }
    keep = n;
    total = std::accumulate(probs.begin(), probs.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  double draw = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (std::size_t i = 0; i < keep; ++i) {
    draw -= probs[i];
    if (draw < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace fleet::model
