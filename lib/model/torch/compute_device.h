// Where a model runs: the --device flag of every program that runs one.
// Torch-free header: programs include it; compute_device.cpp asks libtorch.
#pragma once

#include <string>

namespace fleet::model {

/// The device kinds the toolkit computes on.
enum class ComputeDevice { kCpu, kCuda };

/// Resolves a --device value: "cpu"; "cuda" (UsageError naming the reason
/// when this build's libtorch has no CUDA or sees no GPU); "auto" (CUDA when a
/// GPU is visible, otherwise the CPU). Anything else is a UsageError.
ComputeDevice resolve_device(const std::string& choice);

/// "cpu" or "cuda".
const char* device_name(ComputeDevice device);

/// The dtype a model computes in when the user names none: float32 on the
/// CPU, bfloat16 on a GPU (which has the tensor cores for it).
std::string default_compute_dtype(ComputeDevice device);

}  // namespace fleet::model
