// Occupancy against hand-worked cases (CUDA occupancy rules) on each device.
#include <gtest/gtest.h>

#include "common/error.h"
#include "orion/kernel_profile.h"
#include "orion/occupancy.h"

namespace fleet::orion {
namespace {

TEST(Occupancy, ThreadLimitedOnV100) {
  // 1024 threads = 32 warps: 2048 threads per SM allow 2 blocks.
  const Occupancy o = compute_occupancy({400, 1024, 16, 0, 0}, device_by_name("v100"));
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_EQ(o.limiter, OccupancyLimiter::kThreads);
  EXPECT_EQ(o.warps_per_sm, 64);
  EXPECT_EQ(o.sms_needed, 200);
}

TEST(Occupancy, BlockLimitedOnV100) {
  // 32-thread blocks: threads would allow 64, the 32-block limit binds; 33 blocks need 2 SMs.
  const Occupancy o = compute_occupancy({33, 32, 0, 0, 0}, device_by_name("v100-16"));
  EXPECT_EQ(o.blocks_per_sm, 32);
  EXPECT_EQ(o.limiter, OccupancyLimiter::kBlocks);
  EXPECT_EQ(o.sms_needed, 2);
}

TEST(Occupancy, RegisterLimitedOnA100) {
  // 128 regs x 32 threads = 4096 per warp; 65536 / 4096 = 16 warps = 2 blocks of 8 warps.
  const Occupancy o = compute_occupancy({216, 256, 128, 0, 0}, device_by_name("a100-40"));
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_EQ(o.limiter, OccupancyLimiter::kRegisters);
  EXPECT_EQ(o.sms_needed, 108);
}

TEST(Occupancy, RegistersAreAllocatedPerWarpInUnitsOf256) {
  // 33 regs x 32 = 1056, rounded up to 1280 per warp: 65536 / 1280 = 51 warps,
  // so 12 blocks of 4 warps (a per-thread count would wrongly give 15).
  const Occupancy o = compute_occupancy({1000, 128, 33, 0, 0}, device_by_name("a100-80"));
  EXPECT_EQ(o.blocks_per_sm, 12);
  EXPECT_EQ(o.limiter, OccupancyLimiter::kRegisters);
  EXPECT_EQ(o.sms_needed, 84);  // ceil(1000 / 12)
}

TEST(Occupancy, SharedMemoryLimitedOnH100CountsDynamicMemory) {
  // 48 KiB static + 16 KiB dynamic + 1 KiB reserved = 66560 B; 228 KiB / 66560 = 3 blocks.
  const Occupancy with_dynamic = compute_occupancy({132, 128, 32, 48 * 1024, 16 * 1024}, device_by_name("h100"));
  EXPECT_EQ(with_dynamic.blocks_per_sm, 3);
  EXPECT_EQ(with_dynamic.limiter, OccupancyLimiter::kSharedMemory);
  EXPECT_EQ(with_dynamic.sms_needed, 44);
  // Without the dynamic part: 49 KiB per block, 4 blocks.
  EXPECT_EQ(compute_occupancy({132, 128, 32, 48 * 1024, 0}, device_by_name("h100")).blocks_per_sm, 4);
  // H200 has the same SM.
  EXPECT_EQ(compute_occupancy({132, 128, 32, 48 * 1024, 16 * 1024}, device_by_name("H200")).blocks_per_sm, 3);
}

TEST(Occupancy, ImpossibleLaunchesAreRejected) {
  const DeviceSpec& v100 = device_by_name("v100");
  EXPECT_THROW(compute_occupancy({1, 2048, 0, 0, 0}, v100), InputError);
  EXPECT_THROW(compute_occupancy({1, 128, 0, 0, 97 * 1024}, v100), InputError);
  EXPECT_THROW(compute_occupancy({0, 128, 0, 0, 0}, v100), InputError);
  EXPECT_THROW(compute_occupancy({1, 128, 300, 0, 0}, v100), InputError);
  EXPECT_THROW(device_by_name("tpu-v5"), InputError);
}

TEST(Classification, RooflineAndUtilization) {
  const DeviceSpec& v100 = device_by_name("v100");
  EXPECT_NEAR(v100.ridge_point(), 17.44, 0.01);
  EXPECT_EQ(classify_by_roofline(100, 1, v100), KernelClass::kCompute);
  EXPECT_EQ(classify_by_roofline(10, 1, v100), KernelClass::kMemory);
  EXPECT_EQ(classify_by_roofline(5, 0, v100), KernelClass::kCompute);
  EXPECT_EQ(classify_by_roofline(-1, 10, v100), KernelClass::kUnknown);
  EXPECT_EQ(classify_by_utilization(80, 20), KernelClass::kCompute);
  EXPECT_EQ(classify_by_utilization(20, 70), KernelClass::kMemory);
  EXPECT_EQ(classify_by_utilization(10, 5), KernelClass::kUnknown);
}

}  // namespace
}  // namespace fleet::orion
