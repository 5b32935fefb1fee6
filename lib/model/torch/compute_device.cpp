#include "model/torch/compute_device.h"

#include <torch/torch.h>

#include "common/error.h"
#include "fleet/config.h"

namespace fleet::model {

ComputeDevice resolve_device(const std::string& choice) {
  if (choice == "cpu") return ComputeDevice::kCpu;
  const bool gpu = torch::cuda::is_available();
  if (choice == "auto") return gpu ? ComputeDevice::kCuda : ComputeDevice::kCpu;
  if (choice == "cuda") {
    if (gpu) return ComputeDevice::kCuda;
    throw UsageError(FLEET_TORCH_CUDA
                         ? "--device cuda: libtorch sees no GPU (check the driver and CUDA_VISIBLE_DEVICES)"
                         : "--device cuda: this build's libtorch has no CUDA (build against a CUDA "
                           "libtorch: scripts/build-torch2.sh, docs/gpu.md)");
  }
  throw UsageError("--device must be cpu, cuda or auto, got '" + choice + "'");
}

const char* device_name(ComputeDevice device) { return device == ComputeDevice::kCuda ? "cuda" : "cpu"; }

std::string default_compute_dtype(ComputeDevice device) {
  return device == ComputeDevice::kCuda ? "bfloat16" : "float32";
}

}  // namespace fleet::model
