// Random workloads through every policy: the report must never show a
// figure that sharing a GPU cannot produce. Each case here was found that
// way (a server at 1.30x its dedicated throughput, a shared tail below the
// dedicated one, iteration times that contradict the throughput); this test
// keeps the search running on 60 workloads of its own. (Without
// cover_shared_windows, one of them shows a server at 1.08x alone.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "orion/policy.h"
#include "orion/report.h"
#include "orion/simulator.h"
#include "sim_fixtures.h"

namespace fleet::orion {
namespace {

// Draws from a fixed 64-bit generator by plain arithmetic (no library
// distribution), so every machine builds the same workloads.
class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}
  double unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  double between(double lo, double hi) { return lo + (hi - lo) * unit(); }
  int integer(int lo, int hi) { return lo + static_cast<int>(unit() * (hi - lo + 1)); }
  bool chance(double p) { return unit() < p; }

 private:
  std::mt19937_64 rng_;
};

Workload random_workload(std::uint64_t seed) {
  Draw d(seed);
  const int clients = d.integer(2, 3);
  const int hp = d.chance(0.8) ? d.integer(0, clients - 1) : -1;
  std::vector<ClientSpec> specs;
  for (int c = 0; c < clients; ++c) {
    std::vector<SimKernel> kernels;
    const int n = d.integer(1, 25);
    for (int k = 0; k < n; ++k) {
      const KernelClass cls = d.chance(0.45)  ? KernelClass::kCompute
                              : d.chance(0.8) ? KernelClass::kMemory
                                              : KernelClass::kUnknown;
      // 2 us to 6 ms, spread over three decades (by a table, not std::exp:
      // libm may round differently from one CPU to another).
      static constexpr double kScales[] = {2, 5, 12, 30, 80, 200, 500, 1200, 3000};
      const double us = kScales[d.integer(0, 8)] * d.between(1, 2);
      kernels.push_back(testing::kernel(us, d.integer(1, 240), cls));
    }
    const bool training = d.chance(0.4);
    const bool open_loop = !training && d.chance(0.7);
    const double rate = open_loop ? d.between(10, 300) : 0;
    ClientSpec spec = testing::client("c" + std::to_string(c), kernels, c == hp, training, d.integer(20, 150), rate);
    if (open_loop && d.chance(0.3)) spec.arrivals.kind = ArrivalKind::kUniform;
    if (!open_loop && d.chance(0.4)) spec.gap_us = d.between(0, 20'000);
    if (c != hp && d.chance(0.3)) spec.requests = 0;  // until the bounded clients are done
    spec.warmup = d.integer(0, 3);
    if (d.chance(0.3)) spec.launch_overhead_us = d.between(0, 25);
    if (d.chance(0.3)) spec.mps_active_thread_percentage = d.between(20, 100);
    specs.push_back(spec);
  }
  if (std::all_of(specs.begin(), specs.end(), [](const ClientSpec& s) { return s.requests == 0; }))
    specs[0].requests = 40;
  Workload w = testing::workload(specs, seed);
  w.launch_overhead_us = d.between(0, 8);
  return w;
}

TEST(RandomWorkloads, NoPolicyShowsAFigureSharingCannotProduce) {
  int compared = 0, overloaded = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("workload seed " + std::to_string(seed));
    const Workload w = random_workload(seed);
    SimResult dedicated = simulate(w, "dedicated");
    std::vector<SimResult> runs;
    for (const std::string& policy : select_policies("all", w)) runs.push_back(simulate(w, policy));
    cover_shared_windows(w, dedicated, runs);
    runs.insert(runs.begin(), dedicated);
    for (const ComparisonRow& row : compare_to_dedicated(runs, dedicated)) {
      SCOPED_TRACE(row.policy + " / " + row.client);
      EXPECT_TRUE(std::isfinite(row.throughput_per_s) && std::isfinite(row.p99_ms) && std::isfinite(row.mean_ms));
      EXPECT_GE(row.throughput_per_s, 0);
      overloaded += row.outcome == "overloaded" ? 1 : 0;
      if (row.policy == "dedicated") {
        if (row.outcome == "ok") {
          EXPECT_DOUBLE_EQ(row.p99_vs_dedicated, 1.0);
          EXPECT_DOUBLE_EQ(row.throughput_vs_dedicated, 1.0);
        }
        continue;
      }
      if (row.outcome != "ok") continue;
      ++compared;
      // Sharing slows a client or leaves it be; a few per cent of slack for
      // where the window cuts a request or cycle in progress.
      EXPECT_LE(row.throughput_vs_dedicated, 1.03);
      EXPECT_GE(row.p99_vs_dedicated, 0.97);
    }
  }
  EXPECT_GT(compared, 200);  // the search covers the comparisons, not only outcomes
  EXPECT_GT(overloaded, 0);
}

}  // namespace
}  // namespace fleet::orion
