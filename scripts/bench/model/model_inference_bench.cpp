// Prefill and decode speed of lib/model on one model folder, printed as JSON.
// scripts/bench/model/model_inference.sh runs it beside transformers on the same
// model, batch, lengths and thread count (or GPU).
//
//   bench_model_inference MODEL_DIR BATCH PROMPT_LEN NEW_TOKENS THREADS REPEATS [cpu|cuda]
// On cuda the model computes in bfloat16 and every timing ends with a device synchronisation.
#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/torch/cpu_threads.h"
#include "model/torch/llama.h"

using namespace fleet::model;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) try {
  if (argc != 7 && argc != 8) {
    std::cerr << "usage: bench_model_inference MODEL_DIR BATCH PROMPT_LEN NEW_TOKENS THREADS REPEATS [cpu|cuda]\n";
    return 2;
  }
  const bool cuda = argc == 8 && std::string(argv[7]) == "cuda";
  const torch::Device device = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto now = [cuda] {
    if (cuda) torch::cuda::synchronize();
    return Clock::now();
  };
  const std::int64_t batch = std::stoll(argv[2]), prompt = std::stoll(argv[3]), new_tokens = std::stoll(argv[4]);
  const int repeats = std::stoi(argv[6]);
  set_cpu_threads(std::stoi(argv[5]));  // libtorch's and OpenBLAS's threads, as the programs do
  auto model = LlamaModel::load(argv[1], cuda ? torch::kBFloat16 : torch::kFloat32, device);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
  auto tokens = torch::randint(model.config().vocab_size, {batch, prompt}, gen, torch::kInt64).to(device);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(batch)), counts(static_cast<std::size_t>(batch), prompt);
  for (std::int64_t b = 0; b < batch; ++b) slots[static_cast<std::size_t>(b)] = b;
  double best_prefill = 1e30, best_decode = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {  // the first round warms up
    KvCache cache(model.config(), batch, prompt + new_tokens, model.dtype(), device);
    auto t0 = now();
    auto logits = model.forward_cached(cache, slots, tokens, counts);
    auto next = logits.argmax(-1).view({batch, 1});
    auto t1 = now();
    std::vector<std::int64_t> ones(static_cast<std::size_t>(batch), 1);
    for (std::int64_t t = 0; t < new_tokens; ++t)
      next = model.forward_cached(cache, slots, next, ones).argmax(-1).view({batch, 1});
    auto t2 = now();
    if (r == 0) continue;
    best_prefill = std::min(best_prefill, std::chrono::duration<double>(t1 - t0).count());
    best_decode = std::min(best_decode, std::chrono::duration<double>(t2 - t1).count());
  }
  nlohmann::json out = {{"device", cuda ? "cuda" : "cpu"},
                        {"prefill_tokens_per_s", static_cast<double>(batch * prompt) / best_prefill},
                        {"decode_tokens_per_s", static_cast<double>(batch * new_tokens) / best_decode},
                        {"parameters", model.config().parameter_count()}};
  std::cout << out.dump() << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_model_inference: error: " << e.what() << "\n";
  return 1;
}
