// Simulator speed in kernels per second, against a baseline measured in the
// same run: one pass over the same kernel stream that only reads each kernel
// (the least any simulator must do). The ratio is what to compare across machines.
#include <benchmark/benchmark.h>

#include "orion/simulator.h"

namespace {

using namespace fleet::orion;

const Workload& reference_workload() {
  static const Workload w = [] {
    Workload loaded = load_workload(std::string(FLEET_SOURCE_DIR) + "/examples/orion/rnet50_inf_train.json");
    for (ClientSpec& c : loaded.clients) {
      if (c.requests > 0) c.requests = 500;
    }
    return loaded;
  }();
  return w;
}

void BM_Simulate(benchmark::State& state, const char* policy) {
  std::uint64_t kernels = 0;
  for (auto _ : state) {
    const SimResult r = simulate(reference_workload(), policy);
    kernels += r.kernels;
    benchmark::DoNotOptimize(r.clients[0].p99_ms);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(kernels));
}
BENCHMARK_CAPTURE(BM_Simulate, orion, "orion")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Simulate, mps, "mps")->Unit(benchmark::kMillisecond);

// Baseline: read every kernel of the same number of requests/iterations once.
void BM_ReplayBaseline(benchmark::State& state) {
  const SimResult sized = simulate(reference_workload(), "orion");
  const Workload& w = reference_workload();
  std::uint64_t kernels = 0;
  for (auto _ : state) {
    double total = 0;
    std::uint64_t n = 0;
    while (n < sized.kernels) {
      for (const ClientSpec& c : w.clients) {
        for (const SimKernel& k : c.kernels) {
          total += k.duration_us * k.sm_need;
          ++n;
        }
      }
    }
    kernels += n;
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(kernels));
}
BENCHMARK(BM_ReplayBaseline)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
