// How big a simulation will be, known before it starts, and the caps that
// bound its memory and time: a valid workload (an HP client sending 100
// requests over 10 000 s beside a best-effort client of 1 us iterations)
// can ask for 10^10 iterations, whose latencies alone would exhaust memory
// after half an hour. Such a run is refused before it starts, naming the
// client; one the estimate misses stops at the cap with the same error.
#pragma once

#include <cstdint>
#include <string>

#include "orion/workload.h"

namespace fleet::orion {

/// Requests (or iterations) whose latency one client keeps in one run: 16
/// bytes each, 160 MB per client at the cap; 3000 times the largest of the
/// shipped sweeps.
inline constexpr std::int64_t kMaxRecordsPerClient = 10'000'000;
/// Kernels one policy's run may simulate (about 10 minutes of simulation at
/// the 2-4 M kernels/s measured on one core; docs/benchmarks.md).
inline constexpr double kMaxSimulatedKernels = 2e9;

/// A lower bound on a run's length and what it holds: the bounded clients'
/// requests take at least their arrival spans (open loop) or their solo run
/// time (closed loop); the clients without a request count run that long.
struct SimulationSize {
  double seconds = 0;           ///< simulated time, at least
  double kernels = 0;           ///< kernels simulated, at least (unbounded clients at their solo speed: at most)
  std::string largest_client;   ///< the client with the most requests
  double largest_requests = 0;  ///< its requests
};

/// Estimates `workload`'s size (see SimulationSize).
SimulationSize estimate_simulation_size(const Workload& workload);

/// InputError naming the client and what to change when the estimate is
/// above kMaxRecordsPerClient or kMaxSimulatedKernels.
void check_simulation_size(const Workload& workload);

}  // namespace fleet::orion
