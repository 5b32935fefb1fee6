// Mutated profile CSVs, Nsight Compute exports and workload JSON: each parses
// or fails with InputError — never a crash or another exception (run under
// ASan/UBSan too). FLEET_FUZZ_ITERATIONS=N runs longer by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "orion/kernel_profile.h"
#include "orion/ncu_import.h"
#include "orion/simulation_size.h"
#include "orion/workload.h"
#include "fuzz_util.h"
#include "test_util.h"

namespace fleet::orion {
namespace {

const std::filesystem::path kExamples = std::filesystem::path(FLEET_SOURCE_DIR) / "examples" / "orion";

std::string mutate(std::string text, std::mt19937_64& rng) {
  static const char* tokens[] = {
      ",", "\"", "\n", "\r\n", "-1", "1e400", "n/a", "(256, 1", "nan", "", "9999999999999999999"};
  const int kind = static_cast<int>(rng() % 4);
  if (text.empty()) return text;
  const std::size_t at = rng() % text.size();
  if (kind == 0) {
    text[at] = static_cast<char>(rng() & 0xff);
  } else if (kind == 1) {
    text.insert(at, tokens[rng() % std::size(tokens)]);
  } else if (kind == 2) {
    text.erase(at, 1 + rng() % 8);
  } else {
    text.resize(at);
  }
  return text;
}

TEST(ParserFuzz, NcuExportsAndProfilesNeverCrash) {
  const DeviceSpec& device = device_by_name("a100-40");
  const std::string inputs[] = {read_file(kExamples / "ncu_sample_raw.csv"),
                                read_file(kExamples / "ncu_sample_details.csv")};
  const std::string profile = read_file(kExamples / "profiles" / "mobilenetv2_4_fwd.csv").substr(0, 2000);
  fleet::testing::TempDir dir;
  std::mt19937_64 rng(7);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < fleet::testing::fuzz_iterations(3000); ++i) {
    std::string text = inputs[i % 2];
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) text = mutate(text, rng);
    try {
      const KernelProfile p = import_ncu_csv(text, "fuzz.csv", device);
      for (const KernelRecord& k : p.kernels) EXPECT_GE(k.duration_ns, 0.0);
      ++accepted;
    } catch (const InputError&) {
      ++rejected;
    }
  }
  for (int i = 0; i < fleet::testing::fuzz_iterations(1000); ++i) {
    write_file_atomically(dir / "p.csv", mutate(mutate(profile, rng), rng));
    try {
      read_kernel_profile(dir / "p.csv");
      ++accepted;
    } catch (const InputError&) {
      ++rejected;
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, 500);
}

TEST(ParserFuzz, WorkloadJsonNeverCrashes) {
  fleet::testing::TempDir dir;
  const std::vector<std::string> seeds = {read_file(kExamples / "rnet50_inf_train.json"),
                                          read_file(kExamples / "fig7_rnet_mnet.json")};
  const auto counts =
      fleet::testing::fuzz(seeds, fleet::testing::fuzz_iterations(1500), 31, [&](const std::string& text) {
        std::ofstream(dir / "w.json", std::ios::binary | std::ios::trunc) << text;
        const Workload w = load_workload(dir / "w.json", {kExamples / "profiles", kExamples});
        (void)estimate_simulation_size(w);
      });
  EXPECT_GT(counts.accepted, 20);
  EXPECT_GT(counts.rejected, 300);
}

}  // namespace
}  // namespace fleet::orion
