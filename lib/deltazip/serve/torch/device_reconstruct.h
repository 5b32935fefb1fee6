// A fine-tuned model rebuilt from the base dz-serve already holds, on the
// base's device: what swap and full mode keep resident. On a GPU the base
// never crosses to the host and the host decodes nothing: the packed deltas
// (2-4 bits per weight) are uploaded and decoded into a copy of the base's
// weights there by the CUDA kernel. Include only from torch targets.
#pragma once

#include "deltazip/container.h"
#include "model/torch/llama.h"

namespace fleet::deltazip {

/// Base + delta for every tensor, float32 on `base`'s device: reconstruct_model()
/// on that device, with the packed entries decoded by the CUDA kernel where
/// the base is on a GPU and the build has the kernel (the same bits as the
/// CPU's decoding). The caller has checked the base identity; InputError
/// for a delta of another architecture or a malformed entry.
model::LlamaModel reconstruct_on_base_device(const DeltaReader& reader, const model::LlamaModel& base);

}  // namespace fleet::deltazip
