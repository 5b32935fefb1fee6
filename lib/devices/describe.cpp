#include <fmt/format.h>

#include "devices/device_info.h"

namespace fleet::devices {

std::string describe_devices(const DeviceReport& report) {
  if (report.gpus.empty()) return "GPUs: none (" + report.note + ")";
  std::string out = fmt::format("GPUs: {}", report.gpus.size());
  for (const GpuDevice& g : report.gpus) {
    out +=
        fmt::format("\n  {}: {}, {} SMs, {:.1f} GiB, sm_{}{}", g.index, g.name, g.sm_count,
                    static_cast<double>(g.memory_bytes) / (1024.0 * 1024.0 * 1024.0), g.compute_major, g.compute_minor);
  }
  return out;
}

}  // namespace fleet::devices
