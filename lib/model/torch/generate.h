// Text generation with the KV cache: all prompts of a batch are prefilled
// together and decoded step by step, each row stopping on its own.
#pragma once

#include <cstdint>
#include <vector>

#include "model/sampler.h"
#include "model/torch/llama.h"

namespace fleet::model {

struct GenerationOptions {
  std::int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<std::int64_t> stop_tokens;  ///< generation of a row ends after one of these (not returned)
  std::int64_t max_batch = 32;            ///< prompts decoded together
};

/// The new tokens after each prompt (stop token excluded). Row i samples
/// from its own seeded stream, so results do not depend on batching.
std::vector<std::vector<std::int64_t>> generate(const LlamaModel& model,
                                                const std::vector<std::vector<std::int64_t>>& prompts,
                                                const GenerationOptions& options);

}  // namespace fleet::model
