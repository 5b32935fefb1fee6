// A fine-tuned model rebuilt from its base and its delta container: what
// `dz-compress decompress` writes and what dz-serve's swap and full modes
// keep resident. Include only from torch targets.
#pragma once

#include <functional>
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

/// Adds a packed delta to `weights` (float32, contiguous, holding the
/// base's values, on the model's device) in place.
using PackedAdder = std::function<void(const PackedMatrix& packed, torch::Tensor& weights)>;

/// Base + delta for every tensor, float32 on `device`. Each tensor starts as
/// a copy of the base's and takes its delta in place, so no second
/// model-sized buffer exists. Packed entries are added by `add_packed` where
/// given (dz-serve's GPU rebuild decodes them on the device), otherwise
/// decoded on the CPU and added on `device` (one rounding either way: the
/// same bits). A low-rank delta's factors are decoded on the CPU and
/// multiplied on `device`. The caller has checked the base identity; InputError for a
/// delta of another architecture or without an entry for some tensor.
model::LlamaModel reconstruct_model(const DeltaReader& reader, const model::LlamaModel& base,
                                    torch::Device device = torch::kCPU, const PackedAdder& add_packed = {});

}  // namespace fleet::deltazip
