// What accelerators this process can use; the CPU fallback needs none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fleet::devices {

/// One visible GPU.
struct GpuDevice {
  int index = 0;                   ///< CUDA device ordinal
  std::string name;                ///< e.g. "NVIDIA H200"
  int sm_count = 0;                ///< streaming multiprocessors
  std::uint64_t memory_bytes = 0;  ///< total device memory
  int compute_major = 0;           ///< compute capability
  int compute_minor = 0;
};

/// Result of looking for GPUs.
struct DeviceReport {
  std::vector<GpuDevice> gpus;  ///< empty when none can be used
  std::string note;             ///< why none: "built without CUDA", the driver's message, ...
};

/// Looks for GPUs through the backends this build has (registry.cpp).
/// Never throws: any failure means "no GPU" with the reason in `note`.
DeviceReport detect_gpus();

/// "GPUs: 1 (0: NVIDIA H200, 132 SMs, 139.8 GiB, sm_90)" or "GPUs: none (reason)".
std::string describe_devices(const DeviceReport& report);

}  // namespace fleet::devices

namespace fleet::devices {

/// The device lines programs print under --version (detects on each call).
std::string version_details();

}  // namespace fleet::devices
