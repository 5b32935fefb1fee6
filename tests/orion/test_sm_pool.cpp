// Block-level occupancy of the simulated SMs: which units fit beside which,
// in what order SMs are taken, and that releasing gives back exactly what
// was taken.
#include <gtest/gtest.h>

#include "common/error.h"
#include "orion/device_spec.h"
#include "orion/occupancy.h"
#include "orion/sm_pool.h"
#include "orion/workload.h"

namespace fleet::orion {
namespace {

SmShare uniform(double x) { return {x, x, x, x}; }

TEST(SmPool, AFullUnitLeavesNoRoomAndOneClientHoldsOneUnitPerSm) {
  SmPool pool(8, 3);
  EXPECT_EQ(pool.place(0, uniform(1.0), 5), 5);
  EXPECT_EQ(pool.busy_sms(), 5);
  // Three idle SMs left; a full unit of another client fits only there.
  EXPECT_EQ(pool.place(1, uniform(1.0), 10), 3);
  EXPECT_EQ(pool.busy_sms(), 8);
  EXPECT_EQ(pool.place(2, uniform(0.01), 1), 0);  // nothing fits beside full units
  // Client 0 already has a unit on each SM that could take a small one.
  pool.release(1, 3);
  EXPECT_EQ(pool.place(0, uniform(1.0), 10), 3);  // only the three SMs it does not hold
}

TEST(SmPool, UnitsShareAnSmUpToEachResource) {
  SmPool pool(4, 3);
  // Shares of (warps, registers, shared memory, block slots).
  const SmShare warp_bound = {0.75, 0.25, 0.1, 0.5};
  const SmShare shared_bound = {0.25, 0.5, 0.9, 0.0625};  // fills warps and shared memory exactly
  const SmShare more_warps = {0.3, 0.1, 0.0, 0.1};
  EXPECT_EQ(pool.place(0, warp_bound, 4), 4);
  EXPECT_EQ(pool.place(1, shared_bound, 4), 4);
  EXPECT_EQ(pool.busy_sms(), 4);
  EXPECT_EQ(pool.place(2, more_warps, 4), 0);  // 1.0 + 0.3 of the warps
  const std::uint64_t generation = pool.generation();
  pool.release(0, 4);
  EXPECT_GT(pool.generation(), generation);    // room came back: waiting kernels look again
  EXPECT_EQ(pool.place(2, more_warps, 4), 4);  // 0.25 + 0.3 warps, 0.9 + 0 shared memory
  pool.release(1, 4);
  pool.release(2, 4);
  EXPECT_EQ(pool.busy_sms(), 0);
  // Everything given back exactly: full units fit on every SM again.
  EXPECT_EQ(pool.place(0, uniform(1.0), 4), 4);
}

TEST(SmPool, IdleSmsAreTakenBeforeSharedOnes) {
  SmPool pool(4, 2);
  EXPECT_EQ(pool.place(0, uniform(0.5), 2), 2);
  EXPECT_EQ(pool.place(1, uniform(0.5), 2), 2);  // the two idle SMs, not beside client 0
  EXPECT_EQ(pool.busy_sms(), 4);
  EXPECT_THROW(pool.release(1, 3), std::logic_error);  // holds only two
  EXPECT_THROW(SmPool(0, 1), InputError);
  EXPECT_THROW(SmPool(80, 65), InputError);
}

TEST(ResidentShare, WhatOneSmsWorthOfBlocksHolds) {
  const DeviceSpec& v100 = device_by_name("v100");
  // 256 threads, 64 registers, 24 KiB shared: registers allow 65536 / (64 * 32) / 8 = 4 blocks,
  // shared memory 96 / 24 = 4: 4 blocks = 32 warps of 64, all registers, all shared memory, 4 of 32 slots.
  const SmShare s = resident_share({1000, 256, 64, 24 * 1024, 0}, v100);
  EXPECT_DOUBLE_EQ(s[0], 0.5);
  EXPECT_DOUBLE_EQ(s[1], 1.0);
  EXPECT_DOUBLE_EQ(s[2], 1.0);
  EXPECT_DOUBLE_EQ(s[3], 4.0 / 32);
  // A grid smaller than the blocks an SM could hold: only its blocks count.
  const SmShare small = resident_share({2, 128, 0, 0, 0}, v100);
  EXPECT_DOUBLE_EQ(small[0], 8.0 / 64);
  EXPECT_DOUBLE_EQ(small[1], 0.0);  // registers unknown
  EXPECT_DOUBLE_EQ(small[3], 2.0 / 32);
}

TEST(ResidentShare, ProfilesWithLaunchDataCarryItIntoTheSimulator) {
  KernelProfile profile;
  profile.source = "p.csv";
  KernelRecord with_launch;
  with_launch.name = "gemm";
  with_launch.sm_usage = 250;
  with_launch.duration_ns = 1000;
  with_launch.grid_blocks = 1000;
  with_launch.threads_per_block = 256;
  with_launch.registers_per_thread = 64;
  with_launch.static_shared_bytes = 24 * 1024;
  KernelRecord without = with_launch;
  without.grid_blocks = 0;  // Orion's CSVs: no launch data
  profile.kernels = {with_launch, without};
  const DeviceSpec& v100 = device_by_name("v100");
  const std::vector<SimKernel> k = to_sim_kernels(profile, v100);
  EXPECT_EQ(k[0].sm_share, resident_share({1000, 256, 64, 24 * 1024, 0}, v100));
  EXPECT_EQ(k[1].sm_share, SmShare{});                  // the simulator's class default applies
  profile.kernels[0].static_shared_bytes = 200 * 1024;  // fits no V100 SM
  try {
    to_sim_kernels(profile, v100);
    FAIL() << "an impossible launch was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'gemm' of p.csv cannot run on v100-16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fleet::orion
