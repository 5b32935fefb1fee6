// The transformer on a CUDA device when the linked libtorch has one: the
// same code as on the CPU, same logits. Skips without a GPU.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "model/llama.h"
#include "model/synthetic_tasks.h"
#include "model/tokenizer.h"
#include "model/trainer.h"

namespace fleet::model {
namespace {

TEST(LlamaGpu, CachedForwardMatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to libtorch";
  auto config = llama_preset("tiny");
  auto cpu = LlamaModel::random(config, 2);
  auto tokens = torch::randint(config.vocab_size, {2, 16}, torch::kInt64);
  torch::NoGradGuard no_grad;
  auto expected = cpu.forward(tokens);
  // Round trip through a folder onto the GPU, as a program would load it.
  auto dir = std::filesystem::temp_directory_path() / "gpufleet_llama_gpu_test";
  std::filesystem::create_directories(dir);
  cpu.save(dir);
  auto gpu = LlamaModel::load(dir, torch::kFloat32, torch::kCUDA);
  std::filesystem::remove_all(dir);
  KvCache cache(config, 2, 32, torch::kFloat32, torch::kCUDA);
  auto got = gpu.forward_cached(cache, {0, 1}, tokens.to(torch::kCUDA), {16, 16}, true).to(torch::kCPU);
  double scale = expected.abs().max().item<double>();
  EXPECT_LE((got - expected).abs().max().item<double>(), 1e-3 * scale);
}

// Training on the GPU (float32 weights, bfloat16 autocast): the loss falls as
// it does on the CPU, and the checkpoint written from GPU memory loads back.
TEST(LlamaGpu, TrainingStepsLowerTheLoss) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to libtorch";
  const auto dir = std::filesystem::temp_directory_path() / "gpufleet_train_gpu_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "init");
  LlamaModel::random(llama_preset("tiny"), 3).save(dir / "init");
  write_file_atomically(dir / "init" / "tokenizer.json", byte_tokenizer_json());
  write_file_atomically(dir / "base.txt", make_synthetic_corpus(SyntheticTask::kBase, 400, 1));
  TrainJob job;
  job.model = dir / "init";
  job.data = {dir / "base.txt"};
  job.output = dir / "run";
  job.device = "cuda";
  job.options.steps = 30;
  job.options.batch_size = 8;
  job.options.seq_len = 64;
  job.options.lr = 3e-3;
  job.options.warmup_steps = 3;
  job.log_every = 0;
  const TrainResult result = train(job);
  EXPECT_LT(result.last_loss, result.first_loss * 0.8) << result.first_loss << " -> " << result.last_loss;
  auto reloaded = LlamaModel::load(dir / "run", torch::kFloat32);
  EXPECT_TRUE(torch::isfinite(reloaded.named_parameters().front().second).all().item<bool>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fleet::model
