#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "orion/kernel_profile.h"
#include "orion/ncu_import.h"
#include "test_util.h"

namespace fleet::orion {
namespace {

using testing::error_of;

const std::filesystem::path kExamples = std::filesystem::path(FLEET_SOURCE_DIR) / "examples" / "orion" / "profiles";

TEST(KernelProfile, ReadsOrionsOwnFilesUnchanged) {
  const KernelProfile p = read_kernel_profile(kExamples / "resnet50_4_fwd.csv");
  ASSERT_EQ(p.kernels.size(), 175u);
  EXPECT_EQ(p.kernels[0].name, "Conv");
  EXPECT_EQ(p.kernels[0].profile, KernelClass::kCompute);
  EXPECT_EQ(p.kernels[0].sm_usage, 98);
  EXPECT_DOUBLE_EQ(p.kernels[0].duration_ns, 100480);
  EXPECT_EQ(p.kernels[1].profile, KernelClass::kMemory);
  EXPECT_EQ(p.kernels[0].grid_blocks, 0);  // not in Orion's columns
  EXPECT_GT(p.total_duration_ns(), 1e6);
}

TEST(KernelProfile, ExtendedRoundTripKeepsEverything) {
  testing::TempDir dir;
  KernelProfile p;
  KernelRecord k;
  k.name = "void gemm<float, 128>(int, \"quoted\")";
  k.profile = KernelClass::kCompute;
  k.sm_usage = 216;
  k.duration_ns = 1234.5;
  k.grid_blocks = 432;
  k.threads_per_block = 256;
  k.registers_per_thread = 96;
  k.static_shared_bytes = 16384;
  k.dynamic_shared_bytes = 2048;
  k.flops = 1.5e9;
  k.dram_bytes = 2e7;
  p.kernels = {k, KernelRecord{"elementwise", KernelClass::kUnknown, 0, 3, 10}};
  p.device = "h200";
  write_kernel_profile(dir / "p.csv", p);
  const KernelProfile back = read_kernel_profile(dir / "p.csv");
  EXPECT_EQ(back.device, "h200");
  ASSERT_EQ(back.kernels.size(), 2u);
  EXPECT_EQ(back.kernels[0].name, k.name);
  EXPECT_EQ(back.kernels[0].grid_blocks, 432);
  EXPECT_EQ(back.kernels[0].dynamic_shared_bytes, 2048);
  EXPECT_DOUBLE_EQ(back.kernels[0].flops, 1.5e9);
  EXPECT_DOUBLE_EQ(back.kernels[0].duration_ns, 1234.5);
  EXPECT_EQ(back.kernels[1].profile, KernelClass::kUnknown);
  EXPECT_EQ(back.kernels[1].flops, -1);
}

TEST(KernelProfile, MalformedRowsNameLineAndColumn) {
  testing::TempDir dir;
  const auto path = dir / "bad.csv";
  auto check = [&](const std::string& body, const std::string& expected) {
    write_file_atomically(path, "Name,Profile,Memory_footprint,SM_usage,Duration\n" + body);
    const std::string message = error_of([&] { read_kernel_profile(path); });
    EXPECT_NE(message.find(expected), std::string::npos) << "got: " << message;
  };
  check("Conv,1,0,98,100\nBN,2,0,64,40\n", "line 3, column 'Profile': profile must be 1 (compute), 0 (memory) or -1");
  check("Conv,1,0,98,fast\n", "line 2, column 'Duration': expected a number, got 'fast'");
  check("Conv,1,0,98\n", "line 2: expected 5 fields (as in the header), found 4");
  check("Conv,1,0,-3,10\n", "line 2, column 'SM_usage': SM usage cannot be negative");
  check("\"Conv,1,0,98,10\n", "unterminated quoted field");
  check("Conv,1,-5,98,10\n", "line 2, column 'Memory_footprint': memory footprint cannot be negative");
  // Launch data beyond any GPU (they would overflow the occupancy arithmetic).
  auto check_launch = [&](const std::string& launch, const std::string& expected) {
    write_file_atomically(
        path, "Name,Profile,Memory_footprint,SM_usage,Duration,Grid,Block,Registers\nConv,1,0,98,10," + launch + "\n");
    const std::string message = error_of([&] { read_kernel_profile(path); });
    EXPECT_NE(message.find(expected), std::string::npos) << "got: " << message;
  };
  check_launch("10,99999999999,32", "column 'Block': is beyond any GPU's limit");
  check_launch("10,256,70000", "column 'Registers': is beyond any GPU's limit");
  check_launch("10,256,32", "no error");
  // The GPU the profile was measured on: a known one, the same on every row.
  auto check_device = [&](const std::string& rows, const std::string& expected) {
    write_file_atomically(path, "Name,Profile,Memory_footprint,SM_usage,Duration,Device\n" + rows);
    const std::string message = error_of([&] { read_kernel_profile(path); });
    EXPECT_NE(message.find(expected), std::string::npos) << "got: " << message;
  };
  check_device("Conv,1,0,98,10,rtx4090\n", "line 2, column 'Device': unknown device 'rtx4090'");
  check_device("Conv,1,0,98,10,h100\nBN,0,0,40,5,h200\n",
               "line 3, column 'Device': every kernel of a profile must come from one GPU ('h100' above)");
  check_device("Conv,1,0,98,10,v100\nBN,0,0,40,5,\n", "line 3, column 'Device': every kernel");
  check_device("Conv,1,0,98,10,a100\nBN,0,0,40,5,a100-40\n", "no error");  // an alias is the same GPU
  EXPECT_EQ(read_kernel_profile(path).device, "a100-40");
  check_device("Conv,1,0,98,10,\n", "no error");  // not recorded
  EXPECT_EQ(read_kernel_profile(path).device, "");
  write_file_atomically(path, "Name,Profile,SM_usage,Duration\nConv,1,98,10\n");
  EXPECT_NE(error_of([&] { read_kernel_profile(path); }).find("missing column 'Memory_footprint'"), std::string::npos);
}

// A raw-page export (metric columns, units row), as `ncu --csv --page raw` writes it.
const char* kNcuRaw =
    "==PROF== Connected to process 1234\n"
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid "
    "Size\","
    "\"Device\",\"CC\",\"dram__bytes.sum\",\"gpu__time_duration.sum\",\"launch__block_size\",\"launch__grid_size\","
    "\"launch__registers_per_thread\",\"launch__shared_mem_per_block_dynamic\",\"launch__shared_mem_per_block_static\","
    "\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum\","
    "\"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum\",\"smsp__sass_thread_inst_executed_op_fmul_pred_on.sum\"\n"
    "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"Mbyte\",\"usecond\",\"\",\"\",\"register/"
    "thread\",\"Kbyte\",\"byte\",\"%\","
    "\"inst\",\"inst\",\"inst\"\n"
    "\"0\",\"1234\",\"python\",\"host\",\"void sgemm<128, 64>(float*, float const*)\",\"1\",\"7\",\"(256, 1, "
    "1)\",\"(54, 4, 1)\","
    "\"0\",\"8.0\",\"2\",\"150.5\",\"256\",\"216\",\"128\",\"0\",\"16384\",\"85.2\",\"1,000,000,000\",\"0\",\"0\"\n"
    "\"1\",\"1234\",\"python\",\"host\",\"vectorized_elementwise_kernel\",\"1\",\"7\",\"(128, 1, 1)\",\"(4096, 1, 1)\","
    "\"0\",\"8.0\",\"40\",\"30\",\"128\",\"4096\",\"16\",\"0\",\"0\",\"20.1\",\"0\",\"1000000\",\"0\"\n";

TEST(NcuImport, RawPageWithUnits) {
  const KernelProfile p = import_ncu_csv(kNcuRaw, "raw.csv", device_by_name("a100-40"));
  EXPECT_EQ(p.device, "a100-40");  // the durations were measured there
  ASSERT_EQ(p.kernels.size(), 2u);
  const KernelRecord& gemm = p.kernels[0];
  EXPECT_EQ(gemm.name, "void sgemm<128, 64>(float*, float const*)");
  EXPECT_DOUBLE_EQ(gemm.duration_ns, 150500);
  EXPECT_EQ(gemm.grid_blocks, 216);
  EXPECT_EQ(gemm.threads_per_block, 256);
  EXPECT_EQ(gemm.registers_per_thread, 128);
  EXPECT_EQ(gemm.static_shared_bytes, 16384);
  EXPECT_DOUBLE_EQ(gemm.dram_bytes, 2e6);
  EXPECT_DOUBLE_EQ(gemm.flops, 2e9);               // FMA counts twice
  EXPECT_EQ(gemm.profile, KernelClass::kCompute);  // 1000 FLOP/byte
  EXPECT_EQ(gemm.sm_usage, 108);                   // register-limited: 2 blocks per SM
  const KernelRecord& ew = p.kernels[1];
  EXPECT_EQ(ew.profile, KernelClass::kMemory);  // 1e6 FLOP over 40 MB
  EXPECT_EQ(ew.sm_usage, 256);                  // 16 blocks of 128 threads per SM
}

// A details-page export (one metric per row), older display names, no FLOP counters.
const char* kNcuDetails =
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid "
    "Size\","
    "\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
    "\"0\",\"1\",\"p\",\"h\",\"conv_kernel\",\"1\",\"7\",\"(256, 1, 1)\",\"(160, 1, 1)\",\"0\",\"7.0\",\"GPU Speed Of "
    "Light\","
    "\"Duration\",\"msecond\",\"1.25\"\n"
    "\"0\",\"1\",\"p\",\"h\",\"conv_kernel\",\"1\",\"7\",\"(256, 1, 1)\",\"(160, 1, 1)\",\"0\",\"7.0\",\"GPU Speed Of "
    "Light\","
    "\"SM [%]\",\"%\",\"91.3\"\n"
    "\"0\",\"1\",\"p\",\"h\",\"conv_kernel\",\"1\",\"7\",\"(256, 1, 1)\",\"(160, 1, 1)\",\"0\",\"7.0\",\"GPU Speed Of "
    "Light\","
    "\"Memory Throughput\",\"Gbyte/second\",\"312.5\"\n"
    "\"0\",\"1\",\"p\",\"h\",\"conv_kernel\",\"1\",\"7\",\"(256, 1, 1)\",\"(160, 1, 1)\",\"0\",\"7.0\",\"GPU Speed Of "
    "Light\","
    "\"DRAM Throughput\",\"%\",\"35\"\n"
    "\"0\",\"1\",\"p\",\"h\",\"conv_kernel\",\"1\",\"7\",\"(256, 1, 1)\",\"(160, 1, 1)\",\"0\",\"7.0\",\"Launch "
    "Statistics\","
    "\"Registers Per Thread\",\"register/thread\",\"64\"\n"
    "\"0\",\"1\",\"p\",\"h\",\"conv_kernel\",\"1\",\"7\",\"(256, 1, 1)\",\"(160, 1, 1)\",\"0\",\"7.0\",\"Launch "
    "Statistics\","
    "\"Dynamic Shared Memory Per Block\",\"Kbyte\",\"32\"\n"
    "\"1\",\"1\",\"p\",\"h\",\"bn_kernel\",\"1\",\"7\",\"(512, 1, 1)\",\"(80, 1, 1)\",\"0\",\"7.0\",\"GPU Speed Of "
    "Light\","
    "\"Duration\",\"usecond\",\"40.5\"\n"
    "\"1\",\"1\",\"p\",\"h\",\"bn_kernel\",\"1\",\"7\",\"(512, 1, 1)\",\"(80, 1, 1)\",\"0\",\"7.0\",\"GPU Speed Of "
    "Light\","
    "\"Compute (SM) Throughput\",\"%\",\"12\"\n"
    "\"1\",\"1\",\"p\",\"h\",\"bn_kernel\",\"1\",\"7\",\"(512, 1, 1)\",\"(80, 1, 1)\",\"0\",\"7.0\",\"GPU Speed Of "
    "Light\","
    "\"Memory Throughput\",\"%\",\"88\"\n";

TEST(NcuImport, DetailsPageWithDisplayNames) {
  const KernelProfile p = import_ncu_csv(kNcuDetails, "details.csv", device_by_name("v100"));
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_DOUBLE_EQ(p.kernels[0].duration_ns, 1.25e6);
  EXPECT_EQ(p.kernels[0].profile, KernelClass::kCompute);  // SM 91% > DRAM 35%
  EXPECT_EQ(p.kernels[0].grid_blocks, 160);
  EXPECT_EQ(p.kernels[0].dynamic_shared_bytes, 32000);
  // 64 regs x 32 = 2048/warp -> 32 warps -> 4 blocks of 8 warps; shared: 32000 B -> 3 blocks (96 KiB).
  EXPECT_EQ(p.kernels[0].sm_usage, 54);  // ceil(160 / 3)
  EXPECT_DOUBLE_EQ(p.kernels[1].duration_ns, 40500);
  EXPECT_EQ(p.kernels[1].profile, KernelClass::kMemory);
  EXPECT_EQ(p.kernels[1].sm_usage, 20);  // 512 threads -> 4 blocks per SM
}

TEST(NcuImport, MalformedExportsAreClearErrors) {
  const DeviceSpec& v100 = device_by_name("v100");
  EXPECT_NE(error_of([&] {
              import_ncu_csv("\"Kernel Name\",\"x\"\n\"k\",\"1\"\n", "a.csv", v100);
            }).find("missing column 'ID'"),
            std::string::npos);
  std::string bad_unit = kNcuDetails;
  bad_unit.replace(bad_unit.find("msecond"), 7, "fortnight");
  EXPECT_NE(error_of([&] { import_ncu_csv(bad_unit, "b.csv", v100); }).find("unknown unit 'fortnight'"),
            std::string::npos);
  std::string bad_value = kNcuDetails;
  bad_value.replace(bad_value.find("\"1.25\""), 6, "\"soon\"");
  EXPECT_NE(error_of([&] { import_ncu_csv(bad_value, "c.csv", v100); }).find("line 2, column 'Metric Value'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { import_ncu_csv("\"ID\",\"Kernel Name\"\n", "d.csv", v100); }).find("no kernels"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              import_ncu_csv(
                  "\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
                  "\"0\",\"k\",\"SM [%]\",\"%\",\"50\"\n",
                  "e.csv", v100);
            }).find("has no duration metric"),
            std::string::npos);
  // Amounts that parse as numbers but cannot be counts (negative, or infinite
  // once scaled by their unit): refused, never written into a profile.
  for (const char* value : {"-5", "1e308"}) {
    const std::string text = std::string("\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n") +
                             "\"0\",\"k\",\"Duration\",\"usecond\",\"10\"\n" +
                             "\"0\",\"k\",\"dram__bytes.sum\",\"Mbyte\",\"" + value + "\"\n";
    const std::string message = error_of([&] { import_ncu_csv(text, "f.csv", v100); });
    EXPECT_NE(message.find("DRAM bytes of kernel 'k' is not a plausible value"), std::string::npos)
        << value << ": " << message;
  }
}

}  // namespace
}  // namespace fleet::orion
