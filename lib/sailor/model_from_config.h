// The planner's model description derived from a Hugging Face config.json:
// per-layer parameters, activation sent onward and activation kept for
// backward, per tensor-parallel degree. Llama (and Mistral), OPT, GPT-NeoX
// and GPT-Neo families.
#pragma once

#include <string>

#include "common/json.h"
#include "sailor/specs.h"

namespace fleet::sailor {

/// Layers in the planner's order: the embedding, one per transformer block,
/// the head (final norm + LM head). Parameters are exact for the family's
/// modules; activation memory per block follows Korthikanti et al. (2022),
/// s*h*(10 + 24/t + 5*a*s/(h*t)) bytes per sequence without recomputation,
/// divided by `activation_bytes_per_float` so that the simulator's
/// calibration turns it back into those bytes. TP degrees 1, 2, 4, 8 that
/// divide the heads are listed. InputError naming the field for another
/// family or missing sizes.
ModelSpec model_spec_from_hf_config(const JsonValue& config, int sequence_length, double activation_bytes_per_float,
                                    const std::string& name);

}  // namespace fleet::sailor
