#include "orion/simulation_size.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "common/error.h"

namespace fleet::orion {

namespace {

// Solo time of one request of `c`, kernel launches included, in seconds.
double request_seconds(const ClientSpec& c, const Workload& w) {
  double kernel_us = 0;
  for (const SimKernel& k : c.kernels) kernel_us += k.duration_us;
  const double launch_us = c.launch_overhead_us >= 0 ? c.launch_overhead_us : w.launch_overhead_us;
  // Launches overlap the kernels: the request takes the longer of the two.
  return std::max(kernel_us, launch_us * static_cast<double>(c.kernels.size())) * 1e-6;
}

// Time a bounded client needs at least for its requests (warm-up included).
double bounded_seconds(const ClientSpec& c, const Workload& w) {
  const double n = static_cast<double>(c.requests + c.warmup);
  switch (c.arrivals.kind) {
    case ArrivalKind::kClosedLoop:
      return n * (request_seconds(c, w) + c.gap_us * 1e-6);
    case ArrivalKind::kPoisson:
    case ArrivalKind::kUniform:
      return c.arrivals.rate_per_s > 0 ? (n - 1) / c.arrivals.rate_per_s : 0;
    case ArrivalKind::kTrace: {
      const auto& gaps = c.arrivals.trace_gaps_s;
      if (gaps.empty()) return 0;
      const double cycle = std::accumulate(gaps.begin(), gaps.end(), 0.0);
      const double whole = std::floor(n / static_cast<double>(gaps.size()));
      const auto rest = static_cast<std::size_t>(n - whole * static_cast<double>(gaps.size()));
      return whole * cycle + std::accumulate(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(rest), 0.0);
    }
  }
  return 0;
}

}  // namespace

SimulationSize estimate_simulation_size(const Workload& w) {
  SimulationSize size;
  for (const ClientSpec& c : w.clients)
    if (c.requests > 0) size.seconds = std::max(size.seconds, bounded_seconds(c, w));
  if (w.max_duration_s > 0)
    size.seconds = size.seconds > 0 ? std::min(size.seconds, w.max_duration_s) : w.max_duration_s;
  for (const ClientSpec& c : w.clients) {
    double requests = static_cast<double>(c.requests + c.warmup);
    if (c.requests <= 0) {
      // Runs as long as the others: as many requests as fit, at its solo speed.
      const double each = request_seconds(c, w) + c.gap_us * 1e-6;
      requests = c.arrivals.kind == ArrivalKind::kClosedLoop ? (each > 0 ? size.seconds / each : 0)
                                                             : size.seconds * std::max(0.0, c.arrivals.rate_per_s);
    }
    size.kernels += requests * static_cast<double>(c.kernels.size());
    if (requests > size.largest_requests) {
      size.largest_requests = requests;
      size.largest_client = c.name;
    }
  }
  return size;
}

void check_simulation_size(const Workload& w) {
  const SimulationSize size = estimate_simulation_size(w);
  const std::string span = fmt::format("the run lasts at least {:.4g} s of simulated time", size.seconds);
  if (size.largest_requests > static_cast<double>(kMaxRecordsPerClient))
    throw InputError(fmt::format("client '{}' would complete about {:.3g} requests ({}); a run keeps at most {} per "
                                 "client: give it a request count, or shorten the run (fewer requests, a higher "
                                 "rate, max_duration_s)",
                                 size.largest_client, size.largest_requests, span, kMaxRecordsPerClient),
                     ErrorContext{w.source, "", std::nullopt});
  if (size.kernels > kMaxSimulatedKernels)
    throw InputError(fmt::format("the run would simulate about {:.3g} kernels ({}); at most {:.3g} are simulated per "
                                 "policy: shorten the run (fewer requests, a higher rate, max_duration_s)",
                                 size.kernels, span, kMaxSimulatedKernels),
                     ErrorContext{w.source, "", std::nullopt});
}

}  // namespace fleet::orion
