#include <gtest/gtest.h>

#include "devices/device_info.h"

namespace fleet::devices {
namespace {

// Label gpu: runs for real only where a GPU is visible.
TEST(DevicesGpu, VisibleGpuHasPlausibleProperties) {
  const DeviceReport report = detect_gpus();
  if (report.gpus.empty()) GTEST_SKIP() << "no GPU: " << report.note;
  for (const GpuDevice& g : report.gpus) {
    EXPECT_GT(g.sm_count, 0);
    EXPECT_GT(g.memory_bytes, 1ull << 30);
    EXPECT_GE(g.compute_major, 7);
    EXPECT_FALSE(g.name.empty());
  }
}

}  // namespace
}  // namespace fleet::devices
