// The one place that decides, at run time, which device backend answers.
#include "devices/device_info.h"
#include "fleet/config.h"

#if FLEET_WITH_CUDA
#include "devices/cuda/cuda_devices.h"
#endif

namespace fleet::devices {

DeviceReport detect_gpus() {
#if FLEET_WITH_CUDA
  return cuda_detect_gpus();
#else
  return DeviceReport{{}, "built without CUDA"};
#endif
}

std::string version_details() { return describe_devices(detect_gpus()); }

}  // namespace fleet::devices
