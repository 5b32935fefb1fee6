// Measured energy of a GPU from the NVIDIA driver (NVML's total energy
// counter), for `sailor-run train --metrics`. NVML is loaded at run time, so
// the toolkit builds and runs without it; where it is missing (no driver, a
// CPU machine, a GPU older than Volta) the meter is simply absent.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace fleet::sailor::runtime {

class GpuEnergyMeter {
 public:
  /// The meter of the GPU this process computes on: CUDA_VISIBLE_DEVICES's
  /// first entry (an index or a GPU-... UUID), else device 0. nullptr when
  /// NVML or the counter is not available; `why` then says why.
  static std::unique_ptr<GpuEnergyMeter> open(std::string* why = nullptr);

  ~GpuEnergyMeter();
  GpuEnergyMeter(const GpuEnergyMeter&) = delete;
  GpuEnergyMeter& operator=(const GpuEnergyMeter&) = delete;

  /// Joules the GPU has used since the driver loaded; nullopt if a read fails.
  std::optional<double> total_joules() const;

 private:
  struct Api;
  explicit GpuEnergyMeter(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

/// Which GPU CUDA_VISIBLE_DEVICES's value names first: its index, or its
/// UUID ("GPU-..."); an empty value names device 0.
struct VisibleDevice {
  int index = 0;
  std::string uuid;  ///< non-empty: the device is named by UUID
};
VisibleDevice first_visible_device(const char* cuda_visible_devices);

}  // namespace fleet::sailor::runtime
