// Reports of simulations: per policy and client, latency percentiles and
// throughput next to the dedicated-GPU baseline; as a table, JSON and CSV.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orion/simulator.h"

namespace fleet::orion {

/// One row: a client under one policy, compared with its dedicated run.
struct ComparisonRow {
  std::string policy;
  std::string client;
  bool high_priority = false;
  bool training = false;
  std::int64_t completed = 0;                ///< measured requests/iterations
  std::int64_t completed_in_window = 0;      ///< of those, within the common window (what "too few" counts)
  std::int64_t in_flight_at_window_end = 0;  ///< issued but not completed when the window closed
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, mean_ms = 0;
  double throughput_per_s = 0;
  double p99_vs_dedicated = 0;         ///< p99 / dedicated p99
  double throughput_vs_dedicated = 0;  ///< throughput / dedicated throughput
  double busy_fraction = 0;            ///< GPU time with work, for the policy's run
  double sm_utilization = 0;
  /// ok; "starved" (not one request, warm-up included, ended in the window);
  /// "too few" (< kMinCompletedForRatios in the window): no ratios then;
  /// "overloaded" (an open-loop client whose requests arrived faster than
  /// they were served, here or alone): its latencies grow with the run's
  /// length, so no latency ratio; the throughput ratio stays.
  std::string outcome = "ok";
  double offered_load = -1;            ///< open loop: arrival rate x mean service time (-1: closed loop or too few)
  std::int64_t forced_admissions = 0;  ///< BE kernels admitted after the bounded wait
  std::int64_t preempted = 0;          ///< BE kernels reset by HP arrivals (reef)
  /// HP rows of shared runs: the fraction of the time this client had a
  /// request in progress during which best-effort blocks ran beside it;
  /// -1 elsewhere (BE rows, dedicated runs).
  double corun_fraction = -1;
};

/// Rows for every client of every result, relative to `dedicated`.
std::vector<ComparisonRow> compare_to_dedicated(const std::vector<SimResult>& results, const SimResult& dedicated);
/// Fixed-width table for a terminal.
std::string format_comparison_table(const std::vector<ComparisonRow>& rows);
/// {"rows": [...]} for --json.
nlohmann::json comparison_to_json(const std::vector<ComparisonRow>& rows);
/// CSV, one row per policy and client.
std::string comparison_csv(const std::vector<ComparisonRow>& rows);
/// CSV of every measured latency: policy,client,request,latency_ms (for CDF plots).
std::string latencies_csv(const std::vector<SimResult>& results);

}  // namespace fleet::orion
