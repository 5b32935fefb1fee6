// Measuring a model: perplexity on text, exact-match accuracy on the
// synthetic tasks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/synthetic_tasks.h"
#include "model/torch/llama.h"
#include "text/tokenizer.h"

namespace fleet::model {

struct PerplexityResult {
  std::int64_t tokens = 0;  ///< tokens predicted (all but the first)
  double mean_nll = 0;      ///< mean negative log-likelihood, nats per token
  double perplexity = 0;    ///< exp(mean_nll)
};

/// Scores `tokens` in windows of `window` tokens that overlap by one, so
/// every token after the first is predicted once from up to window-1 tokens
/// of context. `batch` windows share one forward pass.
PerplexityResult evaluate_perplexity(const LlamaModel& model, const std::vector<std::int64_t>& tokens,
                                     std::int64_t window, std::int64_t batch = 8);

struct TaskAccuracy {
  std::string task;
  std::size_t correct = 0, total = 0;
  double accuracy() const { return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0; }
};

/// Greedy exact-match accuracy on `count` fresh examples of `task`: the
/// continuation of each prompt up to the first newline must equal the answer.
TaskAccuracy evaluate_task(const LlamaModel& model, const text::Tokenizer& tokenizer, SyntheticTask task,
                           std::size_t count, std::uint64_t seed);

}  // namespace fleet::model
