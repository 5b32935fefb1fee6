#include <cuda_runtime.h>

#include <string>

#include "devices/cuda/cuda_devices.h"

namespace fleet::devices {

DeviceReport cuda_detect_gpus() {
  DeviceReport report;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    report.note = std::string("CUDA: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later CUDA calls start clean
    return report;
  }
  if (count == 0) {
    report.note = "CUDA: no devices";
    return report;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    report.gpus.push_back(GpuDevice{i, prop.name, prop.multiProcessorCount,
                                    static_cast<std::uint64_t>(prop.totalGlobalMem), prop.major, prop.minor});
  }
  if (report.gpus.empty()) report.note = "CUDA: devices present but their properties could not be read";
  return report;
}

}  // namespace fleet::devices
