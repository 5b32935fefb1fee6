// CUPTI activity records, constructed as CUPTI fills them, through the
// conversion the capture library uses and back through the records reader:
// no GPU or CUPTI runtime needed.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "orion/capture.h"
#include "orion/live/cuda/cupti_records.h"
#include "test_util.h"

namespace fleet::orion::live {
namespace {

CuptiKernelRecord kernel_record(const char* name, std::uint64_t start, std::uint64_t end) {
  CuptiKernelRecord k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.gridX = 216;
  k.gridY = 2;
  k.gridZ = 1;
  k.blockX = 128;
  k.blockY = 1;
  k.blockZ = 1;
  k.registersPerThread = 96;
  k.staticSharedMemory = 16384;
  k.dynamicSharedMemory = 32768;
  k.start = start;
  k.end = end;
  k.streamId = 13;
  return k;
}

TEST(CuptiRecords, KernelAndDeviceRecordsRoundTripThroughTheReader) {
  CuptiDeviceRecord d;
  std::memset(&d, 0, sizeof d);
  d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  d.name = "NVIDIA H200";
  d.numMultiprocessors = 132;
  d.computeCapabilityMajor = 9;
  const std::string lines = device_record_line(d) + "\n" + marker_line(1000, true) + "\n" +
                            kernel_record_line(kernel_record("_Z5sgemmPKfS0_Pf", 1500, 4500)) + "\n" +
                            kernel_record_line(kernel_record("odd \"name\"\\\n", 5000, 5100)) + "\n" +
                            marker_line(9000, false) + "\n";
  fleet::testing::TempDir dir;
  std::ofstream(dir / "records.jsonl") << lines;
  const CaptureRecords r = read_capture_records(dir / "records.jsonl");
  EXPECT_EQ(r.device_name, "NVIDIA H200");
  EXPECT_EQ(r.device_sms, 132);
  ASSERT_EQ(r.kernels.size(), 2u);
  const CapturedKernel& k = r.kernels[0];
  EXPECT_EQ(k.name, "_Z5sgemmPKfS0_Pf");
  EXPECT_EQ(k.grid_blocks, 432);
  EXPECT_EQ(k.threads_per_block, 128);
  EXPECT_EQ(k.registers_per_thread, 96);
  EXPECT_EQ(k.static_shared_bytes, 16384);
  EXPECT_EQ(k.dynamic_shared_bytes, 32768);
  EXPECT_EQ(k.end_ns - k.start_ns, 3000u);
  EXPECT_EQ(k.stream, 13u);
  EXPECT_EQ(r.kernels[1].name, "odd \"name\"\\\n");
  const KernelProfile p = profile_from_capture(r, CaptureOptions{});  // one marked iteration: used, though warm-up
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_DOUBLE_EQ(p.kernels[0].duration_ns, 3000);
  EXPECT_GT(p.kernels[0].sm_usage, 0);
  // A --skip given that leaves nothing is refused, never quietly replaced by the last iteration.
  CaptureOptions skip_all;
  skip_all.skip = 1;
  EXPECT_NE(fleet::testing::error_of([&] { profile_from_capture(r, skip_all); }).find("--skip 1 leaves none"),
            std::string::npos);
}

}  // namespace
}  // namespace fleet::orion::live
