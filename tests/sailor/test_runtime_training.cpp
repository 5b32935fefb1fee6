// The training runtime in one process: determinism under a seed,
// bit-identical resume, refusals; a pipeline stage's forward equals the
// matching slice of the whole model's.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/safetensors.h"
#include "model/synthetic_tasks.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "sailor/runtime/torch/trainer.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace fleet::sailor::runtime {
namespace {

using model::LlamaModel;
using model::make_synthetic_corpus;
using model::SyntheticTask;

std::filesystem::path make_model_folder(const std::filesystem::path& dir) {
  auto config = model::llama_preset("tiny");
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 8;
  auto folder = dir / "init";
  std::filesystem::create_directories(folder);
  LlamaModel::random(config, 3).save(folder);
  write_file_atomically(folder / "tokenizer.json", text::byte_tokenizer_json());
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
  for (const auto& info : f.tensors()) out[info.name] = model::to_torch(f.view(info.name));
  return out;
}

void expect_identical_files(const std::filesystem::path& a, const std::filesystem::path& b) {
  auto ta = tensors_of(a), tb = tensors_of(b);
  ASSERT_EQ(ta.size(), tb.size());
  for (const auto& [name, t] : ta) EXPECT_TRUE(torch::equal(t, tb.at(name))) << name << " differs";
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

TEST(StageForward, SlicesComposeToTheWholeModel) {
  auto config = model::llama_preset("tiny");
  config.num_hidden_layers = 3;
  config.tie_word_embeddings = false;
  auto whole = LlamaModel::random(config, 7);
  auto tokens = torch::randint(0, config.vocab_size, {2, 9}, torch::kInt64);
  auto expected = whole.forward(tokens);
  // Planner layers: 0 embedding, 1..3 blocks, 4 head; split unevenly.
  auto hidden = whole.forward_layers(tokens, 0, 2);
  EXPECT_EQ(hidden.size(2), config.hidden_size);
  hidden = whole.forward_layers(hidden, 2, 4);
  auto logits = whole.forward_layers(hidden, 4, 5);
  EXPECT_TRUE(torch::allclose(logits, expected, 1e-5, 1e-6));
  // A stage keeps only its parameters, under their Hugging Face names.
  auto names = [](const auto& params) {
    std::vector<std::string> out;
    for (const auto& [n, t] : params) out.push_back(n);
    return out;
  };
  auto stage = whole.named_parameters(4, 5);
  EXPECT_EQ(names(stage), (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
  EXPECT_EQ(whole.named_parameters(1, 2).size(), 9u);
  auto copy = LlamaModel::random(config, 7);
  copy.keep_only_layers(2, 4);
  EXPECT_TRUE(torch::allclose(copy.forward_layers(whole.forward_layers(tokens, 0, 2), 2, 4), hidden, 0, 0));
  EXPECT_THROW(whole.forward_layers(tokens, 0, 6), InputError);
  EXPECT_THROW(whole.forward_layers(tokens, 1, 2), InputError);  // a later stage takes hidden states
  // A tied head on its own stage uses the embedding matrix.
  config.tie_word_embeddings = true;
  auto tied = LlamaModel::random(config, 7);
  EXPECT_EQ(names(tied.named_parameters(3, 5)).back(), "model.embed_tokens.weight");
}

// A stage reads only its layers' weights from a model folder, and computes
// what the whole model's slice computes; a tied head's stage reads the embedding.
TEST(StageLoad, ReadsOnlyTheStagesWeights) {
  testing::TempDir dir;
  for (bool tied : {false, true}) {
    auto config = model::llama_preset("tiny");
    config.num_hidden_layers = 3;
    config.tie_word_embeddings = tied;
    const auto folder = dir.path() / (tied ? "tied" : "untied");
    std::filesystem::create_directories(folder);
    LlamaModel::random(config, 5).save(folder);
    auto whole = LlamaModel::load(folder);
    auto tokens = torch::randint(0, config.vocab_size, {2, 7}, torch::kInt64);
    auto hidden = whole.forward_layers(tokens, 0, 2);
    auto middle = LlamaModel::load_layers(folder, 2, 4);
    EXPECT_TRUE(torch::equal(middle.forward_layers(hidden, 2, 4), whole.forward_layers(hidden, 2, 4)));
    EXPECT_FALSE(middle.layer(0).q_proj.defined());
    EXPECT_TRUE(middle.layer(1).q_proj.defined());
    EXPECT_THROW(middle.forward_layers(tokens, 0, 2), std::exception);  // the embedding was not read
    auto last = LlamaModel::load_layers(folder, 4, 5);
    auto h = whole.forward_layers(tokens, 0, 4);
    EXPECT_TRUE(torch::equal(last.forward_layers(h, 4, 5), whole.forward_layers(h, 4, 5))) << "tied " << tied;
    EXPECT_THROW(LlamaModel::load_layers(folder, 3, 7), InputError);
  }
}

}  // namespace
}  // namespace fleet::sailor::runtime
