// Capture records -> kernel profiles: iteration selection by markers,
// medians, occupancy, classes from an ncu export, device names, and
// malformed records.
#include <gtest/gtest.h>

#include <fstream>

#include "orion/capture.h"
#include "orion/occupancy.h"
#include "orion/simulator.h"
#include "test_util.h"

namespace fleet::orion {
namespace {

std::filesystem::path write(const fleet::testing::TempDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir.path() / name;
  std::ofstream(path) << text;
  return path;
}

std::string kernel(const std::string& name, std::uint64_t start, std::uint64_t end, int grid = 120, int block = 256,
                   int registers = 32) {
  return "{\"kind\":\"kernel\",\"name\":\"" + name + "\",\"grid\":[" + std::to_string(grid) + ",1,1],\"block\":[" +
         std::to_string(block) + ",1,1],\"registers\":" + std::to_string(registers) +
         ",\"static_shared\":0,\"dynamic_shared\":0,\"start\":" + std::to_string(start) +
         ",\"end\":" + std::to_string(end) + ",\"stream\":7}\n";
}

std::string marker(bool begin, std::uint64_t t) {
  return std::string("{\"kind\":\"marker\",\"what\":\"") + (begin ? "begin" : "end") + "\",\"t\":" + std::to_string(t) +
         "}\n";
}

// Three marked iterations of the same two kernels; the first is a slow warm-up.
std::string three_iterations() {
  std::string s = "{\"kind\":\"device\",\"name\":\"NVIDIA H200\",\"sms\":132}\n";
  s += kernel("_Z4initv", 0, 50);  // before any marker: not part of an iteration
  const std::uint64_t durations[3][2] = {{9000, 9000}, {1000, 300}, {1200, 500}};
  for (std::uint64_t i = 0; i < 3; ++i) {
    const std::uint64_t t = 100000 * (i + 1);
    s += marker(true, t);
    s += kernel("_Z4gemmv", t + 10, t + 10 + durations[i][0]);
    s += kernel("_Z4relum", t + 20000, t + 20000 + durations[i][1], 4096, 1024, 16);
    s += marker(false, t + 50000);
  }
  return s;
}

TEST(Capture, MarkedIterationsAfterWarmUpGiveMedianDurations) {
  fleet::testing::TempDir dir;
  const CaptureRecords r = read_capture_records(write(dir, "r.jsonl", three_iterations()));
  EXPECT_EQ(r.kernels.size(), 7u);
  EXPECT_EQ(r.markers.size(), 6u);
  std::string summary;
  const KernelProfile p = profile_from_capture(r, CaptureOptions{}, &summary);
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_EQ(p.kernels[0].name, "_Z4gemmv");
  // skip=1 drops the warm-up; of {1000, 1200} the upper median is taken.
  EXPECT_DOUBLE_EQ(p.kernels[0].duration_ns, 1200);
  EXPECT_DOUBLE_EQ(p.kernels[1].duration_ns, 500);
  const DeviceSpec& h200 = device_by_name("h200");
  EXPECT_EQ(p.kernels[1].sm_usage, compute_occupancy(LaunchConfig{4096, 1024, 16, 0, 0}, h200).sms_needed);
  EXPECT_EQ(p.kernels[1].profile, KernelClass::kUnknown);
  EXPECT_EQ(p.device, "h200");  // the CUPTI device record's GPU: where the durations were measured
  EXPECT_NE(summary.find("2 of 3 marked iterations"), std::string::npos) << summary;
  EXPECT_NE(summary.find("h200"), std::string::npos) << summary;
  // 50 us between the markers for 1.7 us of kernels: launch-bound.
  EXPECT_NE(summary.find("launch-bound: an iteration takes 0.050 ms between its markers, its kernels 0.002 ms, so "
                         "about 24.8 us of CPU per launch"),
            std::string::npos)
      << summary;

  CaptureOptions keep_all;
  keep_all.skip = 0;
  EXPECT_DOUBLE_EQ(profile_from_capture(r, keep_all).kernels[0].duration_ns, 1200);  // median of 9000, 1000, 1200
}

TEST(Capture, TheLaunchOverheadOfALaunchBoundClientReproducesItsIterationsInTheSimulator) {
  KernelProfile p;
  for (int i = 0; i < 10; ++i) {
    KernelRecord k;
    k.name = "k" + std::to_string(i);
    k.duration_ns = 1000 + 100 * i;
    k.sm_usage = 4;
    p.kernels.push_back(k);
  }
  // 14.5 us of kernels; iterations of 80-120 us: launch-bound.
  const auto launch_us = launch_bound_overhead_us(p, {120e3, 80e3, 100e3});
  ASSERT_TRUE(launch_us.has_value());
  EXPECT_NEAR(*launch_us, (100e3 - 1900) / 10 / 1e3, 1e-9);
  // The simulator, launching one kernel per that many microseconds, takes
  // the median iteration's time for one.
  Workload w;
  w.device = device_by_name("h200");
  ClientSpec c;
  c.name = "python-client";
  c.kernels = to_sim_kernels(p, w.device);
  c.requests = 3;
  c.launch_overhead_us = *launch_us;
  w.clients.push_back(c);
  const SimResult r = simulate(w, "dedicated");
  ASSERT_EQ(r.clients.at(0).latencies_ms.size(), 3u);
  for (double l : r.clients[0].latencies_ms) EXPECT_NEAR(l, 0.100, 1e-9);
  // Iterations as long as their kernels (GPU-bound) give none.
  EXPECT_FALSE(launch_bound_overhead_us(p, {15e3, 16e3}).has_value());
  EXPECT_FALSE(launch_bound_overhead_us(p, {}).has_value());
}

TEST(Capture, WithoutMarkersEveryKernelCountsOnce) {
  fleet::testing::TempDir dir;
  const CaptureRecords r =
      read_capture_records(write(dir, "r.jsonl",
                                 "{\"kind\":\"device\",\"name\":\"Tesla V100-SXM2-16GB\",\"sms\":80}\n" +
                                     kernel("b", 500, 900) + kernel("a", 100, 200)));
  const KernelProfile p = profile_from_capture(r, CaptureOptions{});
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_EQ(p.kernels[0].name, "a");  // ordered by start time
  EXPECT_DOUBLE_EQ(p.kernels[1].duration_ns, 400);
}

TEST(Capture, ClassesComeFromAnNcuExportByKernelName) {
  fleet::testing::TempDir dir;
  const CaptureRecords r = read_capture_records(write(dir, "r.jsonl", three_iterations()));
  // An ncu raw-page export of the same kernels, with demangled names.
  const std::string ncu =
      "\"ID\",\"Kernel Name\",\"Grid Size\",\"Block Size\",\"Registers Per Thread\",\"gpu__time_duration.sum\","
      "\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_"
      "elapsed\"\n"
      "\"\",\"\",\"\",\"\",\"register/thread\",\"nsecond\",\"%\",\"%\"\n"
      "\"0\",\"gemm()\",\"(120, 1, 1)\",\"(256, 1, 1)\",\"32\",\"1000\",\"85\",\"20\"\n"
      "\"1\",\"relu(float*)\",\"(4096, 1, 1)\",\"(1024, 1, 1)\",\"16\",\"300\",\"15\",\"90\"\n";
  CaptureOptions o;
  o.ncu = write(dir, "ncu.csv", ncu);
  const KernelProfile p = profile_from_capture(r, o);
  EXPECT_EQ(p.kernels[0].profile, KernelClass::kCompute);
  EXPECT_EQ(p.kernels[1].profile, KernelClass::kMemory);
}

TEST(Capture, DeviceNamesMapToTables) {
  EXPECT_EQ(device_for_name("NVIDIA H200", 132).name, "h200");
  EXPECT_EQ(device_for_name("NVIDIA H100 80GB HBM3", 132).name, "h100");
  EXPECT_EQ(device_for_name("NVIDIA A100-SXM4-80GB", 108).name, "a100-80");
  EXPECT_EQ(device_for_name("NVIDIA A100-SXM4-40GB", 108).name, "a100-40");
  EXPECT_NE(fleet::testing::error_of([] { device_for_name("NVIDIA GeForce RTX 4090", 128); }).find("--device"),
            std::string::npos);
}

TEST(Capture, DeviceStandsInOnlyForAGpuWithoutATable) {
  fleet::testing::TempDir dir;
  auto profile_on = [&](const std::string& gpu, const std::string& option) {
    const CaptureRecords r = read_capture_records(
        write(dir, "r.jsonl", "{\"kind\":\"device\",\"name\":\"" + gpu + "\",\"sms\":128}\n" + kernel("a", 100, 200)));
    CaptureOptions o;
    o.device = option;
    return profile_from_capture(r, o);
  };
  EXPECT_EQ(profile_on("NVIDIA GeForce RTX 4090", "h100").device, "h100");  // no table of its own
  EXPECT_EQ(profile_on("NVIDIA H200", "h200").device, "h200");
  EXPECT_EQ(fleet::testing::error_of([&] { profile_on("NVIDIA H200", "h100"); }),
            "--device h100: the program ran on 'NVIDIA H200' (h200); its kernel durations are that GPU's");
}

TEST(Capture, MalformedRecordsNameTheirLine) {
  fleet::testing::TempDir dir;
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{\"kind\":\"kernel\"}\n", ":1: kernel without a name"},
           {kernel("a", 0, 1) + "not json\n", ":2: not a capture record"},
           {"{\"kind\":\"kernel\",\"name\":\"a\",\"grid\":[0,1,1],\"block\":[1,1,1]}\n", "grid"},
           {kernel("a", 10, 5), "ends before it starts"},
           {"{\"kind\":\"marker\",\"what\":\"middle\",\"t\":1}\n", "begin or end"},
       }) {
    const auto path = write(dir, "bad.jsonl", text);
    EXPECT_NE(fleet::testing::error_of([&] { read_capture_records(path); }).find(expected), std::string::npos)
        << expected;
  }
  const CaptureRecords empty =
      read_capture_records(write(dir, "e.jsonl", "{\"kind\":\"device\",\"name\":\"NVIDIA H200\"}\n"));
  EXPECT_NE(fleet::testing::error_of([&] { profile_from_capture(empty, CaptureOptions{}); }).find("no kernels"),
            std::string::npos);
}

}  // namespace
}  // namespace fleet::orion
