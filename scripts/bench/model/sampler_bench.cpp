// Time per sampled token of model::TokenSampler over a vocabulary of
// realistic size, against greedy argmax in the same run (one pass over the
// logits: the floor any sampler pays). Prints one JSON object per case.
//   bench_sampler [VOCAB] [TOKENS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "model/sampler.h"

using fleet::model::SamplingOptions;
using fleet::model::TokenSampler;

namespace {

// Logits shaped like a language model's: most tokens far below a few likely ones.
std::vector<std::vector<float>> make_logits(std::size_t vocab, int rows) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::uniform_int_distribution<std::size_t> pick(0, vocab - 1);
  std::vector<std::vector<float>> out(static_cast<std::size_t>(rows), std::vector<float>(vocab));
  for (auto& row : out) {
    for (auto& v : row) v = noise(rng);
    for (int i = 0; i < 20; ++i) row[pick(rng)] += 8.0f;
  }
  return out;
}

double ns_per_token(const SamplingOptions& options, const std::vector<std::vector<float>>& logits, int tokens) {
  TokenSampler sampler(options, 0);
  std::int64_t sink = 0;
  for (int i = 0; i < 3; ++i) sink += sampler.next(logits[static_cast<std::size_t>(i) % logits.size()]);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < tokens; ++i) sink += sampler.next(logits[static_cast<std::size_t>(i) % logits.size()]);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  if (sink == -1) std::puts("");  // keeps the loop
  return ns / tokens;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t vocab = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 128256;
  const int tokens = argc > 2 ? std::atoi(argv[2]) : 200;
  if (vocab < 2 || tokens < 1) {
    std::fprintf(stderr, "usage: bench_sampler [VOCAB >= 2] [TOKENS >= 1]\n");
    return 2;
  }
  const auto logits = make_logits(vocab, 16);
  struct Case {
    const char* name;
    SamplingOptions options;
  };
  std::vector<Case> cases(5);
  cases[0] = {"greedy", {}};
  cases[1] = {"temperature 1", {}};
  cases[1].options.temperature = 1.0;
  cases[2] = {"temperature 0.7, top_p 0.9", {}};
  cases[2].options.temperature = 0.7;
  cases[2].options.top_p = 0.9;
  cases[3] = {"temperature 1, top_k 50", {}};
  cases[3].options.temperature = 1.0;
  cases[3].options.top_k = 50;
  cases[4] = {"temperature 1, frequency_penalty 0.5", {}};
  cases[4].options.temperature = 1.0;
  cases[4].options.frequency_penalty = 0.5;
  double greedy = 0;
  for (const auto& c : cases) {
    // Median of three runs.
    std::vector<double> runs;
    for (int r = 0; r < 3; ++r) runs.push_back(ns_per_token(c.options, logits, tokens));
    std::sort(runs.begin(), runs.end());
    if (greedy == 0) greedy = runs[1];
    std::printf("{\"case\": \"%s\", \"vocab\": %zu, \"us_per_token\": %.2f, \"vs_greedy\": %.1f}\n", c.name, vocab,
                runs[1] / 1e3, runs[1] / greedy);
  }
  return 0;
}
