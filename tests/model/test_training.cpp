// Training: determinism under a seed, bit-identical resume, the schedule,
// generation and sampling properties.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/safetensors.h"
#include "model/commands.h"
#include "model/device.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model/sampler.h"
#include "model/synthetic_tasks.h"
#include "model/tensor_bridge.h"
#include "model/tokenizer.h"
#include "model/trainer.h"
#include "test_util.h"

namespace fleet::model {
namespace {

// A small byte-vocabulary model folder with its tokenizer.
std::filesystem::path make_model_folder(const std::filesystem::path& dir) {
  auto config = llama_preset("tiny");
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 8;
  auto folder = dir / "init";
  std::filesystem::create_directories(folder);
  LlamaModel::random(config, 3).save(folder);
  write_file_atomically(folder / "tokenizer.json", byte_tokenizer_json());
  return folder;
}

TrainJob small_job(const std::filesystem::path& model, const std::filesystem::path& data,
                   const std::filesystem::path& out) {
  TrainJob job;
  job.model = model;
  job.data = {data};
  job.output = out;
  job.options.steps = 6;
  job.options.batch_size = 4;
  job.options.seq_len = 24;
  job.options.lr = 1e-2;
  job.options.warmup_steps = 2;
  job.options.grad_accumulation = 2;
  job.options.seed = 5;
  job.log_every = 0;
  return job;
}

std::map<std::string, torch::Tensor> tensors_of(const std::filesystem::path& file) {
  SafetensorsFile f(file);
  std::map<std::string, torch::Tensor> out;
  for (const auto& info : f.tensors()) out[info.name] = to_torch(f.view(info.name));
  return out;
}

void expect_identical_files(const std::filesystem::path& a, const std::filesystem::path& b) {
  auto ta = tensors_of(a), tb = tensors_of(b);
  ASSERT_EQ(ta.size(), tb.size());
  for (const auto& [name, t] : ta) EXPECT_TRUE(torch::equal(t, tb.at(name))) << name << " differs";
}

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

class Training : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = make_model_folder(dir_.path());
    data_ = dir_.path() / "base.txt";
    write_file_atomically(data_, make_synthetic_corpus(SyntheticTask::kBase, 300, 1));
  }
  testing::TempDir dir_;
  std::filesystem::path model_, data_;
};

TEST_F(Training, LowersTheLossDeterministically) {
  auto first = train(small_job(model_, data_, dir_.path() / "a"));
  auto second = train(small_job(model_, data_, dir_.path() / "b"));
  ASSERT_EQ(first.losses.size(), 6u);
  EXPECT_EQ(first.losses, second.losses);  // bit for bit
  EXPECT_LT(first.last_loss, first.first_loss - 0.3);
  expect_identical_files(dir_.path() / "a" / "model.safetensors", dir_.path() / "b" / "model.safetensors");
  // The checkpoint is a model folder transformers-style tools read: config, weights, tokenizer.
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "a" / "tokenizer.json"));
  EXPECT_NO_THROW(LlamaModel::load(dir_.path() / "a"));
}

TEST_F(Training, ResumeContinuesBitIdentically) {
  auto straight = train(small_job(model_, data_, dir_.path() / "straight"));
  auto job = small_job(model_, data_, dir_.path() / "resumed");
  job.stop_after = 3;
  auto part1 = train(job);
  EXPECT_EQ(part1.last_step, 3);
  TrainJob resume;
  resume.output = dir_.path() / "resumed";
  resume.resume = true;
  resume.log_every = 0;
  auto part2 = train(resume);
  EXPECT_EQ(part2.first_step, 3);
  EXPECT_EQ(part2.last_step, 6);
  std::vector<double> joined = part1.losses;
  joined.insert(joined.end(), part2.losses.begin(), part2.losses.end());
  EXPECT_EQ(joined, straight.losses);
  expect_identical_files(dir_.path() / "straight" / "model.safetensors", dir_.path() / "resumed" / "model.safetensors");
  expect_identical_files(dir_.path() / "straight" / "optimizer.safetensors",
                         dir_.path() / "resumed" / "optimizer.safetensors");
}

TEST_F(Training, RefusesChangedDataAndExistingRuns) {
  auto job = small_job(model_, data_, dir_.path() / "run");
  job.stop_after = 2;
  train(job);
  auto before = tensors_of(dir_.path() / "run" / "model.safetensors");
  // Starting a new run over a checkpoint would destroy it.
  EXPECT_THROW(train(small_job(model_, data_, dir_.path() / "run")), UsageError);
  write_file_atomically(data_, make_synthetic_corpus(SyntheticTask::kBase, 300, 2));
  TrainJob resume;
  resume.output = dir_.path() / "run";
  resume.resume = true;
  auto message = testing::error_of([&] { train(resume); });
  EXPECT_NE(message.find("training data changed"), std::string::npos) << message;
  auto after = tensors_of(dir_.path() / "run" / "model.safetensors");
  for (const auto& [name, t] : before) EXPECT_TRUE(torch::equal(t, after.at(name))) << name;
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
