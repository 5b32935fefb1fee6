// The training runtime on a GPU (world size 1): float32 weights, bfloat16
// autocast. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "model/synthetic_tasks.h"
#include "model/torch/llama.h"
#include "sailor/runtime/torch/trainer.h"
#include "text/tokenizer.h"

namespace fleet::sailor::runtime {
namespace {

using namespace fleet::model;

// Training on the GPU (float32 weights, bfloat16 autocast): the loss falls as
// it does on the CPU, and the checkpoint written from GPU memory loads back.
TEST(LlamaGpu, TrainingStepsLowerTheLoss) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to libtorch";
  const auto dir = std::filesystem::temp_directory_path() / "gpufleet_train_gpu_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "init");
  LlamaModel::random(llama_preset("tiny"), 3).save(dir / "init");
  write_file_atomically(dir / "init" / "tokenizer.json", text::byte_tokenizer_json());
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
}  // namespace fleet::sailor::runtime
