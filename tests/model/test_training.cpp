// Training: determinism under a seed, bit-identical resume, the schedule,
// generation and sampling properties.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/safetensors.h"
#include "model/sampler.h"
#include "model/synthetic_tasks.h"
#include "model/torch/compute_device.h"
#include "model/torch/cpu_threads.h"
#include "model/torch/generate.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "model/train_options.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace fleet::model {
namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// --threads 1 must mean one busy thread, the BLAS pool behind libtorch's
// matrix products included: the process may burn no more CPU time than wall
// time (with room for noise). A ratio, not a timing: a loaded machine only lowers it.
TEST(CpuThreads, OneThreadMeansOneBusyThread) {
  set_cpu_threads(1);
  EXPECT_EQ(torch::get_num_threads(), 1);
  const auto a = torch::randn({384, 384}), b = torch::randn({384, 384});
  auto sink = torch::zeros({384, 384});
  const double cpu0 = cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  do {
    for (int i = 0; i < 20; ++i) sink.add_(torch::mm(a, b));
  } while (cpu_seconds() - cpu0 < 0.5);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double cpu = cpu_seconds() - cpu0;
  EXPECT_LT(cpu / wall, 1.3) << cpu << " s of CPU in " << wall << " s";
  EXPECT_TRUE(torch::isfinite(sink).all().item<bool>());
  EXPECT_THROW(set_cpu_threads(-1), UsageError);
}

TEST(Device, ResolvesTheFlag) {
  EXPECT_EQ(resolve_device("cpu"), ComputeDevice::kCpu);
  const bool gpu = torch::cuda::is_available();
  EXPECT_EQ(resolve_device("auto"), gpu ? ComputeDevice::kCuda : ComputeDevice::kCpu);
  if (gpu) {
    EXPECT_EQ(resolve_device("cuda"), ComputeDevice::kCuda);
  } else {
    EXPECT_THROW(resolve_device("cuda"), UsageError);
  }
  EXPECT_THROW(resolve_device("tpu"), UsageError);
  EXPECT_THROW(resolve_device(""), UsageError);
  EXPECT_EQ(default_compute_dtype(ComputeDevice::kCpu), "float32");
  EXPECT_EQ(default_compute_dtype(ComputeDevice::kCuda), "bfloat16");
}

TEST(Schedule, WarmsUpThenDecaysToTheFloor) {
  TrainOptions o;
  o.steps = 110;
  o.warmup_steps = 10;
  o.lr = 1.0;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 9), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10), 1.0);
  EXPECT_NEAR(learning_rate(o, 60), 0.55, 1e-12);  // half way down the cosine
  EXPECT_NEAR(learning_rate(o, 110), 0.1, 1e-12);
  o.data_mode = "words";
  EXPECT_THROW(o.validate(), UsageError);
}

TEST(Sampler, GreedyTopKTopPAndSeeds) {
  std::vector<float> logits{0.0f, 3.0f, 1.0f, 3.0f, -2.0f};
  TokenSampler greedy({}, 0);
  EXPECT_EQ(greedy.next(logits), 1);  // first of the tied best
  SamplingOptions top1;
  top1.temperature = 1.0;
  top1.top_k = 1;
  TokenSampler k1(top1, 0);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.next(logits), 1);
  SamplingOptions nucleus;
  nucleus.temperature = 1.0;
  nucleus.top_p = 0.5;  // the two tied tokens hold 0.84 of the mass; the first alone 0.42
  TokenSampler p(nucleus, 0);
  std::map<std::int64_t, int> seen;
  for (int i = 0; i < 200; ++i) ++seen[p.next(logits)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(1) && seen.count(3));
  SamplingOptions hot;
  hot.temperature = 2.0;
  hot.seed = 9;
  TokenSampler a(hot, 4), b(hot, 4), c(hot, 5);
  std::vector<std::int64_t> ra, rb, rc;
  for (int i = 0; i < 50; ++i) {
    ra.push_back(a.next(logits));
    rb.push_back(b.next(logits));
    rc.push_back(c.next(logits));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
  hot.top_p = 0;
  EXPECT_THROW(TokenSampler(hot, 0), UsageError);
}

TEST(Sampler, GreedyTakesTheFirstOfTiedMaxima) {
  // Long enough for the eight running maxima and a tail; ties in different lanes.
  std::vector<float> logits(103, 0.0f);
  logits[37] = logits[21] = logits[101] = 5.0f;
  EXPECT_EQ(TokenSampler({}, 0).next(logits), 21);
  logits[102] = 6.0f;  // in the tail
  EXPECT_EQ(TokenSampler({}, 0).next(logits), 102);
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(TokenSampler({}, 0).next(logits), 0);
  logits[50] = std::numeric_limits<float>::quiet_NaN();
  logits[60] = -1.0f;
  EXPECT_EQ(TokenSampler({}, 0).next(logits), 60);  // a NaN never wins
}

// Draws follow softmax(logits / T) restricted to the nucleus, computed here
// by brute force (sort everything): plain sampling (no order needed) and a
// nucleus that needs more than the first few hundred ranked tokens.
TEST(Sampler, DrawsFollowTheSoftmaxAndTheNucleus) {
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> logits(1000);
  for (auto& v : logits) v = noise(rng);
  logits[17] = logits[18] = 3.5f;  // a tie: both in or both out, by id
  const double temperature = 0.8;
  std::vector<double> p(logits.size());
  double z = 0;
  for (std::size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(logits[i] / temperature);
  for (auto& v : p) v /= z;
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
  for (const double top_p : {1.0, 0.5, 0.97}) {
    std::vector<double> want(p.size(), 0.0);
    double mass = 0;
    for (std::size_t r = 0; r < order.size() && (top_p >= 1.0 || mass < top_p); ++r)
      mass += want[order[r]] = p[order[r]];
    for (auto& v : want) v /= mass;
    const auto nucleus =
        static_cast<std::size_t>(std::count_if(want.begin(), want.end(), [](double v) { return v > 0; }));
    if (top_p == 0.97) {
      EXPECT_GT(nucleus, 256u);  // beyond the first ranking round
    }
    SamplingOptions options;
    options.temperature = temperature;
    options.top_p = top_p;
    TokenSampler sampler(options, 1);
    const int draws = 20000;
    std::vector<int> seen(p.size(), 0);
    for (int i = 0; i < draws; ++i) ++seen[static_cast<std::size_t>(sampler.next(logits))];
    // Each token with 25+ expected draws, and the rare ones together, within
    // 5 standard deviations of the binomial count.
    double worst = 0, rare_expected = 0, rare_seen = 0;
    auto z = [&](double got, double q) { return std::abs(got - q * draws) / std::sqrt(q * draws * (1 - q)); };
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (want[i] == 0) {
        EXPECT_EQ(seen[i], 0) << "token " << i << " outside the nucleus of " << top_p;
      } else if (want[i] * draws >= 25) {
        worst = std::max(worst, z(seen[i], want[i]));
      } else {
        rare_expected += want[i];
        rare_seen += seen[i];
      }
    }
    EXPECT_LT(worst, 5.0) << "top_p " << top_p;
    if (rare_expected > 0) {
      EXPECT_LT(z(rare_seen, rare_expected), 5.0) << "top_p " << top_p;
    }
  }
}

TEST(Sampler, PenaltiesAndLogitBias) {
  const std::vector<float> logits{0.0f, 3.0f, 2.5f, 1.0f};
  // Bias: +100 all but forces token 0, -100 bans the favourite.
  SamplingOptions biased;
  biased.logit_bias = {{0, 100.0f}};
  TokenSampler forced(biased, 0);
  EXPECT_EQ(forced.next(logits), 0);
  biased.logit_bias = {{1, -100.0f}, {99, 5.0f}};  // an id past the vocabulary is ignored
  EXPECT_EQ(TokenSampler(biased, 0).next(logits), 2);
  // Frequency: every time a token was produced costs it 0.6.
  SamplingOptions frequency;
  frequency.frequency_penalty = 0.6;
  TokenSampler f(frequency, 0);
  std::vector<std::int64_t> got;
  for (int i = 0; i < 5; ++i) got.push_back(f.next(logits));
  // 1 (3.0), then 2 (2.5 > 2.4), then 1 (2.4 > 1.9), then 2 (1.9 > 1.8), then 1 (1.8 > 1.3).
  EXPECT_EQ(got, (std::vector<std::int64_t>{1, 2, 1, 2, 1}));
  // Presence: 1.0 once a token has appeared, whatever its count: 1, then 2
  // (2.5 > 2.0), then 1 for good (2.0 > 1.5 > 1.0).
  SamplingOptions presence;
  presence.presence_penalty = 1.0;
  TokenSampler pr(presence, 0);
  got.clear();
  for (int i = 0; i < 4; ++i) got.push_back(pr.next(logits));
  EXPECT_EQ(got, (std::vector<std::int64_t>{1, 2, 1, 1}));
  // Without penalties nothing is remembered: greedy repeats its choice.
  TokenSampler plain({}, 0);
  EXPECT_EQ(plain.next(logits), 1);
  EXPECT_EQ(plain.next(logits), 1);
  presence.presence_penalty = 2.5;
  EXPECT_THROW(TokenSampler(presence, 0), UsageError);
  biased.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(TokenSampler(biased, 0), UsageError);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  // Large logits (exp would overflow float) and a tie between ids 2 and 4.
  const std::vector<float> logits{100.0f, 98.5f, 101.0f, -3.0f, 101.0f, 99.0f};
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l) - 101.0);
  const double log_z = 101.0 + std::log(z);
  auto lp = token_logprobs(logits, 5, 3);
  EXPECT_NEAR(lp.logprob, 99.0 - log_z, 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 2);  // ties: the lower id first
  EXPECT_EQ(lp.top[1].first, 4);
  EXPECT_EQ(lp.top[2].first, 0);
  EXPECT_NEAR(lp.top[0].second, 101.0 - log_z, 1e-5);
  EXPECT_NEAR(lp.top[2].second, 100.0 - log_z, 1e-5);
  double total = 0;
  for (std::int64_t t = 0; t < 6; ++t) total += std::exp(token_logprobs(logits, t, 0).logprob);
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_TRUE(token_logprobs(logits, 3, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits, 3, 50).top.size(), 6u);  // at most the vocabulary
  // Many ties: the alternatives are a full sort's first (by logit, then id).
  std::mt19937 rng(7);
  std::vector<float> many(3000);
  for (auto& l : many) l = static_cast<float>(rng() % 40) * 0.25f;
  std::vector<std::int64_t> order(many.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return many[a] > many[b]; });
  const auto alternatives = token_logprobs(many, 11, 20).top;
  ASSERT_EQ(alternatives.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(alternatives[i].first, order[i]) << i;
}

TEST(Generate, BatchedSamplingEqualsEachAlone) {
  auto config = llama_preset("tiny");
  config.num_hidden_layers = 2;
  config.initializer_range = 0.3;
  auto model = LlamaModel::random(config, 8);
  std::vector<std::vector<std::int64_t>> prompts{{1, 70, 71}, {1, 80}, {1, 90, 91, 92, 93}};
  GenerationOptions options;
  options.max_new_tokens = 7;
  options.sampling.temperature = 0.8;
  options.sampling.top_k = 20;
  options.sampling.seed = 3;
  auto together = generate(model, prompts, options);
  ASSERT_EQ(together.size(), 3u);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    // In a smaller batch, still as row i (the row decides the sampler's stream).
    std::vector<std::vector<std::int64_t>> padded_batch(prompts.begin(), prompts.begin() + static_cast<long>(i) + 1);
    auto alone = generate(model, padded_batch, options);
    EXPECT_EQ(alone[i], together[i]) << "row " << i;
    EXPECT_EQ(together[i].size(), 7u);
  }
  options.stop_tokens = {together[0][2]};
  auto stopped = generate(model, {prompts[0]}, options);
  EXPECT_EQ(stopped[0], std::vector<std::int64_t>(together[0].begin(), together[0].begin() + 2));
}

}  // namespace
}  // namespace fleet::model
