// The GPU energy meter: which device CUDA_VISIBLE_DEVICES names, and a meter
// that is absent (with a reason) rather than wrong where NVML is missing.
#include <gtest/gtest.h>

#include "sailor/runtime/gpu_energy.h"

namespace fleet::sailor::runtime {
namespace {

TEST(GpuEnergy, TheFirstVisibleDeviceByIndexOrUuid) {
  EXPECT_EQ(first_visible_device(nullptr).index, 0);
  EXPECT_EQ(first_visible_device("").index, 0);
  EXPECT_EQ(first_visible_device("3").index, 3);
  EXPECT_EQ(first_visible_device("2,0,1").index, 2);
  const VisibleDevice by_uuid = first_visible_device("GPU-8f6c1a2e-0000-1111-2222-333344445555,1");
  EXPECT_EQ(by_uuid.uuid, "GPU-8f6c1a2e-0000-1111-2222-333344445555");
  EXPECT_EQ(first_visible_device("-1").index, 0);
  EXPECT_EQ(first_visible_device("nonsense").index, 0);
}

TEST(GpuEnergy, AMeterReadsAGrowingCounterOrIsAbsentWithAReason) {
  std::string why;
  const auto meter = GpuEnergyMeter::open(&why);
  if (!meter) {
    // No driver here (CPU machines and CI): the reason is said, nothing is made up.
    EXPECT_FALSE(why.empty());
    return;
  }
  const auto first = meter->total_joules();
  ASSERT_TRUE(first.has_value());
  EXPECT_GE(*first, 0.0);
  const auto second = meter->total_joules();
  ASSERT_TRUE(second.has_value());
  EXPECT_GE(*second, *first);
}

}  // namespace
}  // namespace fleet::sailor::runtime
