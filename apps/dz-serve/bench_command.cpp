#include "dz-serve/bench_command.h"

#include <iostream>

#include <fmt/format.h>

namespace fleet::deltazip {

int run_bench(const BenchCommand& c, bool json) {
  const BenchResult r = run_load(c);
  if (json) {
    std::cout << r.to_json(c).dump(2) << "\n";
  } else {
    std::cout << fmt::format("requests {} completed {} failed {} in {:.1f} s\n", r.requests, r.completed, r.failed,
                             r.elapsed_s)
              << fmt::format("throughput {:.3f} requests/s, {:.1f} tokens/s\n", r.requests_per_s(), r.tokens_per_s())
              << fmt::format("TTFT     p50 {:.3f} s  p90 {:.3f} s  p99 {:.3f} s\n", r.ttft_s.p50, r.ttft_s.p90,
                             r.ttft_s.p99)
              << fmt::format("latency  p50 {:.3f} s  p90 {:.3f} s  p99 {:.3f} s\n", r.latency_s.p50, r.latency_s.p90,
                             r.latency_s.p99);
    for (const auto& [e, n] : r.errors) std::cout << fmt::format("error x{}: {}\n", n, e);
  }
  return r.failed == 0 ? 0 : 1;
}

}  // namespace fleet::deltazip
