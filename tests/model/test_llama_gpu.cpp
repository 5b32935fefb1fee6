// The transformer on a CUDA device when the linked libtorch has one: the
// same code as on the CPU, same logits. Skips without a GPU.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "model/synthetic_tasks.h"
#include "model/torch/llama.h"
#include "model/train_options.h"
#include "text/tokenizer.h"

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

}  // namespace
}  // namespace fleet::model
