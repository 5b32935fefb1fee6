#include "model/torch/generate.h"

#include <algorithm>

#include <torch/torch.h>

#include "common/error.h"

namespace fleet::model {

std::vector<std::vector<std::int64_t>> generate(const LlamaModel& model,
                                                const std::vector<std::vector<std::int64_t>>& prompts,
                                                const GenerationOptions& options) {
  options.sampling.validate();
  if (options.max_new_tokens < 0) throw UsageError("max_new_tokens must be >= 0");
  std::vector<std::vector<std::int64_t>> outputs(prompts.size());
  const auto device = model.device();
  const std::size_t batch = static_cast<std::size_t>(std::max<std::int64_t>(options.max_batch, 1));
  torch::NoGradGuard no_grad;
  for (std::size_t first = 0; first < prompts.size(); first += batch) {
    const std::size_t n = std::min(batch, prompts.size() - first);
    std::int64_t longest = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (prompts[first + i].empty()) throw InputError("prompt " + std::to_string(first + i) + " is empty");
      longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(prompts[first + i].size()));
    }
    KvCache cache(model.config(), static_cast<std::int64_t>(n), longest + options.max_new_tokens, model.dtype(),
                  device);
    std::vector<TokenSampler> samplers;
    std::vector<std::int64_t> slots, counts;
    auto padded = torch::zeros({static_cast<std::int64_t>(n), longest}, torch::kInt64);
    auto* data = padded.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i) {
      samplers.emplace_back(options.sampling, first + i);
      slots.push_back(static_cast<std::int64_t>(i));
      counts.push_back(static_cast<std::int64_t>(prompts[first + i].size()));
      std::copy(prompts[first + i].begin(), prompts[first + i].end(), data + static_cast<std::int64_t>(i) * longest);
    }
    if (options.max_new_tokens == 0) continue;
    auto logits = model.forward_cached(cache, slots, padded.to(device), counts).contiguous().to(torch::kCPU);
    std::vector<std::int64_t> active = slots;
    for (std::int64_t step = 0; !active.empty(); ++step) {
      std::vector<std::int64_t> still, next_tokens;
      for (std::size_t r = 0; r < active.size(); ++r) {
        const auto row = static_cast<std::size_t>(active[r]);
        const float* scores = logits[static_cast<std::int64_t>(r)].data_ptr<float>();
        auto token = samplers[row].next({scores, static_cast<std::size_t>(logits.size(1))});
        bool stop =
            std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end();
        if (!stop) outputs[first + row].push_back(token);
        if (!stop && step + 1 < options.max_new_tokens) {
          still.push_back(active[r]);
          next_tokens.push_back(token);
        }
      }
      active = std::move(still);
      if (active.empty()) break;
      auto input = torch::tensor(next_tokens, torch::kInt64).view({static_cast<std::int64_t>(active.size()), 1});
      logits = model.forward_cached(cache, active, input.to(device), std::vector<std::int64_t>(active.size(), 1))
                   .contiguous()
                   .to(torch::kCPU);
    }
  }
  return outputs;
}

}  // namespace fleet::model
