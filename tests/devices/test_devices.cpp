#include <gtest/gtest.h>

#include "devices/device_info.h"
#include "fleet/config.h"

namespace fleet::devices {
namespace {

TEST(Devices, DescribeListsEachGpu) {
  DeviceReport report;
  report.gpus.push_back(GpuDevice{0, "NVIDIA H200", 132, 150ull << 30, 9, 0});
  EXPECT_EQ(describe_devices(report), "GPUs: 1\n  0: NVIDIA H200, 132 SMs, 150.0 GiB, sm_90");
  EXPECT_EQ(describe_devices(DeviceReport{{}, "built without CUDA"}), "GPUs: none (built without CUDA)");
}

TEST(Devices, DetectionNeverThrowsAndExplainsAnEmptyResult) {
  const DeviceReport report = detect_gpus();
  if (report.gpus.empty()) {
    EXPECT_FALSE(report.note.empty());
  }
  if (!FLEET_WITH_CUDA) {
    EXPECT_EQ(report.note, "built without CUDA");
  }
}

}  // namespace
}  // namespace fleet::devices
