// Nsight Compute CSV exports -> kernel profiles. Reads both the "raw" page
// (one row per kernel, metric names as columns, a units row) and the
// "details" page (one row per metric), with the metric names of the
// releases shipped from CUDA 10 to CUDA 13.
#pragma once

#include <string_view>

#include "orion/device_spec.h"
#include "orion/kernel_profile.h"

namespace fleet::orion {

/// Parses an ncu CSV export (text of the file, `name` for errors). SM need
/// comes from the launch data by the occupancy rules of `device`; the class
/// from FLOPs/bytes when counted, else from SM vs DRAM throughput.
/// InputError naming line and column for anything malformed.
KernelProfile import_ncu_csv(std::string_view text, const std::string& name, const DeviceSpec& device);

}  // namespace fleet::orion
