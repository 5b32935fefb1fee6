// `orion-run simulate`: its options, and the run that prints the comparison
// with the dedicated baseline.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "orion/policy.h"

namespace fleet::orion {

/// Options of `orion-run simulate`.
struct SimulateOptions {
  std::filesystem::path workload;
  std::string policy = "orion";  ///< a policy name or "all"
  std::vector<std::filesystem::path> profile_dirs;
  std::optional<std::filesystem::path> trace;  ///< Chrome trace of the (first non-dedicated) run
  std::optional<std::filesystem::path> csv;    ///< comparison table as CSV
  std::optional<std::filesystem::path> latencies_csv;
  std::optional<std::filesystem::path> contention;  ///< contention model file (default: the V100 calibration)
  std::optional<std::uint64_t> seed;
  std::optional<std::int64_t> requests;  ///< overrides the HP client's request count
  /// Overrides every client's CPU time per kernel launch (the workload's
  /// launch_overhead_us and each client's own); Orion's config format has no
  /// field for it.
  std::optional<double> launch_overhead_us;
  PolicyOptions tuning;  ///< the policies' tunables, as exec takes them too
  bool json = false;
};

/// Runs the simulation(s) and prints the comparison with the dedicated baseline.
int run_simulate(const SimulateOptions& options);

}  // namespace fleet::orion
