#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <vector>

#include "common/error.h"

namespace fleet::model {

namespace {

// Index of the first largest value (NaNs never win). Eight running maxima
// instead of one: std::max_element's single dependency chain took 2.4 ns per
// logit, a pass over a 128k vocabulary per greedy token.
std::size_t first_max(std::span<const float> v) {
  constexpr std::size_t kLanes = 8;
  float lanes[kLanes];
  std::fill(std::begin(lanes), std::end(lanes), -std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  for (; i + kLanes <= v.size(); i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) lanes[j] = v[i + j] > lanes[j] ? v[i + j] : lanes[j];
  float best = -std::numeric_limits<float>::infinity();
  for (; i < v.size(); ++i) best = v[i] > best ? v[i] : best;
  for (float m : lanes) best = m > best ? m : best;
  for (std::size_t k = 0; k < v.size(); ++k)
    if (v[k] == best) return k;
  return 0;  // all NaN
}

}  // namespace

void SamplingOptions::validate() const {
  if (!(temperature >= 0)) throw UsageError("temperature must be >= 0 (0 means greedy)");
  if (top_k < 0) throw UsageError("top-k must be >= 0 (0 means no limit)");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("top-p must be in (0, 1]");
  if (!(std::abs(frequency_penalty) <= 2) || !(std::abs(presence_penalty) <= 2))
    throw UsageError("frequency and presence penalties must be between -2 and 2");
  for (const auto& [id, bias] : logit_bias)
    if (id < 0 || !(std::abs(bias) <= 100))
      throw UsageError("logit bias needs a token id >= 0 and a bias between -100 and 100");
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
        adjusted_[static_cast<std::size_t>(id)] -=
            static_cast<float>(options_.frequency_penalty * count + options_.presence_penalty);
    token = choose(adjusted_);
  }
  if (penalised) ++produced_[token];
  return token;
}

std::int64_t TokenSampler::choose(std::span<const float> logits) {
  const std::size_t vocab = logits.size();
  if (options_.temperature == 0.0) return static_cast<std::int64_t>(first_max(logits));  // first of ties
  float top = 0;  // the largest logit, once known
  const double inverse_temperature = 1.0 / options_.temperature;
  auto weight = [&](std::size_t i) { return std::exp((static_cast<double>(logits[i]) - top) * inverse_temperature); };
  const bool by_rank = options_.top_k > 0 && static_cast<std::size_t>(options_.top_k) < vocab;

  if (!by_rank && options_.top_p >= 1.0) {
    top = logits[first_max(logits)];
    // Plain sampling needs no order: one pass for the weights, one for the draw
    // (sorting a 128k vocabulary for every token cost 13 ms).
    weights_.resize(vocab);
    double total = 0;
    for (std::size_t i = 0; i < vocab; ++i) total += weights_[i] = weight(i);
    double draw = std::uniform_real_distribution<double>(0.0, total)(rng_);
    std::size_t last = 0;
    for (std::size_t i = 0; i < vocab; ++i) {
      if (weights_[i] == 0) continue;
      last = i;
      draw -= weights_[i];
      if (draw < 0) return static_cast<std::int64_t>(i);
    }
    return static_cast<std::int64_t>(last);  // rounding left a sliver of the draw
  }

  // Most likely first; ties by id so that the order never depends on the sort.
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  auto by_score = [&](std::int64_t a, std::int64_t b) {
    const float x = logits[static_cast<std::size_t>(a)], y = logits[static_cast<std::size_t>(b)];
    return x != y ? x > y : a < b;
  };
  auto rank_first = [&](std::size_t n) {
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), order_.end(), by_score);
  };
  // The top k, or for the nucleus alone a first few hundred: it usually
  // holds fewer, and more are ranked only when it needs them.
  const std::size_t keep = by_rank ? static_cast<std::size_t>(options_.top_k) : vocab;
  std::size_t ranked = by_rank ? keep : std::min<std::size_t>(vocab, 256);
  rank_first(ranked);
  top = logits[static_cast<std::size_t>(order_[0])];
  double total = 0;  // of the candidates the nucleus is measured against
  if (by_rank) {
    for (std::size_t i = 0; i < keep; ++i) total += weight(static_cast<std::size_t>(order_[i]));
  } else {
    for (std::size_t i = 0; i < vocab; ++i) total += weight(i);
  }
  std::size_t drawn_from = keep;
  if (options_.top_p < 1.0) {
    // The smallest set of the most likely tokens that holds top_p of the mass.
    const double target = options_.top_p * total;
    double cumulative = 0;
    std::size_t n = 0;
    for (;;) {
      while (n < ranked && cumulative < target) cumulative += weight(static_cast<std::size_t>(order_[n++]));
      if (cumulative >= target || ranked == keep) break;
      ranked = std::min(keep, ranked * 8);
      rank_first(ranked);  // the first n stay where they are: they are the n most likely
    }
    drawn_from = n;  // at least 1: the most likely token alone weighs 1 and the target is above 0
    total = cumulative;
  }
  double draw = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (std::size_t i = 0; i < drawn_from; ++i) {
    draw -= weight(static_cast<std::size_t>(order_[i]));
    if (draw < 0) return order_[i];
  }
  return order_[drawn_from - 1];
}

TokenLogprobs token_logprobs(std::span<const float> logits, std::int64_t token, std::size_t top) {
  // log Z = max + log sum exp(logit - max), summed in double.
  const float max = logits[first_max(logits)];
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = max + std::log(sum);
  TokenLogprobs out;
  out.logprob = static_cast<float>(logits[static_cast<std::size_t>(token)] - log_z);
  top = std::min(top, logits.size());
  if (top == 0) return out;
  // One pass with a heap of the best `top` so far, the worst of them on top
  // (no copy or sort of the vocabulary: this runs in the batch step).
  using Entry = std::pair<float, std::int64_t>;
  auto better = [](const Entry& a, const Entry& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  std::vector<Entry> best;
  best.reserve(top + 1);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const Entry e{logits[i], static_cast<std::int64_t>(i)};
    if (best.size() == top && !better(e, best.front())) continue;
    best.push_back(e);
    std::push_heap(best.begin(), best.end(), better);
    if (best.size() > top) {
      std::pop_heap(best.begin(), best.end(), better);
      best.pop_back();
    }
  }
  std::sort(best.begin(), best.end(), better);
  for (const auto& [logit, id] : best) out.top.emplace_back(id, static_cast<float>(logit - log_z));
  return out;
}

}  // namespace fleet::model
