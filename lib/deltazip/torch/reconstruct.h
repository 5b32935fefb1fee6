// A fine-tuned model rebuilt from its base and its delta container: what
// `dz-compress decompress` writes and what dz-serve's swap and full modes
// keep resident. Include only from torch targets.
#pragma once

#include <string>

#include "deltazip/container.h"
#include "model/torch/llama.h"

namespace fleet::deltazip {

/// Throws InputError naming `source` when the delta's model differs from
/// the base in any shape (vocabulary, widths, layers, heads, tied head).
void check_same_architecture(const model::LlamaConfig& base, const model::LlamaConfig& delta,
                             const std::string& source);

/// A dense entry's stored values as a tensor of its stored dtype (a delta or
/// the full fine-tuned tensor, as `entry.kind` says).
torch::Tensor dense_tensor(const DenseEntry& entry);

/// The fine-tune's config (from the container's header).
model::LlamaConfig delta_config(const DeltaReader& reader);

/// Base + delta for every tensor, float32 on `device` (computed on the CPU,
/// then copied). The caller has checked the base identity.
model::LlamaModel reconstruct_model(const DeltaReader& reader, const model::LlamaModel& base,
                                    torch::Device device = torch::kCPU);

}  // namespace fleet::deltazip
