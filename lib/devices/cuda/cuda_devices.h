// CUDA backend of device detection (target fleet_devices_cuda).
#pragma once

#include "devices/device_info.h"

namespace fleet::devices {

/// Asks the CUDA runtime for devices; any runtime error (no driver, driver
/// too old, no device) becomes an empty report whose note carries the message.
DeviceReport cuda_detect_gpus();

}  // namespace fleet::devices
