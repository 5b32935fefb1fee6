#include "orion-run/simulate_command.h"

#include <algorithm>
#include <iostream>

#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/chrome_trace.h"
#include "common/error.h"
#include "common/json.h"
#include "common/output_check.h"
#include "orion/contention_model.h"
#include "orion/report.h"
#include "orion/simulation_size.h"
#include "orion/simulator.h"

namespace fleet::orion {
namespace {

// The workload file with --seed, --requests and --launch-overhead-us applied.
Workload workload_with_flags(const SimulateOptions& options) {
  Workload workload = load_workload(options.workload, options.profile_dirs);
  if (options.seed) workload.seed = *options.seed;
  if (options.requests) {
    if (*options.requests <= 0) throw UsageError("--requests must be positive");
    for (ClientSpec& c : workload.clients) {
      if (c.requests > 0) {
        c.requests = *options.requests;
        c.warmup = std::min(c.warmup, c.requests / 2);
      }
    }
  }
  if (options.launch_overhead_us) {
    if (!(*options.launch_overhead_us >= 0 && *options.launch_overhead_us <= 1e6))
      throw UsageError("--launch-overhead-us must be 0 to 1e6 microseconds");
    workload.launch_overhead_us = *options.launch_overhead_us;
    for (ClientSpec& c : workload.clients) c.launch_overhead_us = -1;  // the workload's, now the flag's
  }
  return workload;
}

// What the dedicated runs say about the flags and the workload: an HP
// iteration target no threshold can meet, a client overloaded even alone.
void warn_about_dedicated_runs(const Workload& workload, const SimResult& dedicated, const PolicyOptions& policy) {
  if (policy.hp_limit_ms > 0) {
    for (std::size_t i = 0; i < workload.clients.size(); ++i) {
      const ClientResult& alone = dedicated.clients[i];
      if (workload.clients[i].high_priority && workload.clients[i].training && alone.completed > 0 &&
          policy.hp_limit_ms < alone.mean_ms) {
        spdlog::warn(
            "--hp-limit {:g} ms is below the iteration time of '{}' alone ({:.2f} ms): no SM threshold "
            "meets it, so orion's search ends at 0 (best-effort kernels then run outside HP iterations, "
            "or after --max-be-wait)",
            policy.hp_limit_ms, alone.name, alone.mean_ms);
      }
    }
  }
  for (const ClientResult& alone : dedicated.clients) {
    if (alone.overloaded) {
      spdlog::warn(
          "'{}' is overloaded even alone: its requests arrive faster than they are served (offered load "
          "{:.2f}: arrival rate x service time), so its queue and latencies grow with the run's length; "
          "its latencies are not compared (outcome 'overloaded'); lower its rate to measure the sharing",
          alone.name, alone.offered_load);
    }
  }
}

// The comparison as JSON, with what was simulated and the policies' summaries.
nlohmann::json comparison_json(const std::vector<ComparisonRow>& rows, const std::vector<SimResult>& table,
                               const Workload& workload, const SimulateOptions& options) {
  nlohmann::json out = comparison_to_json(rows);
  out["device"] = workload.device.name;
  out["workload"] = workload.source;
  out["seed"] = workload.seed;
  out["launch_overhead_us"] = workload.launch_overhead_us;
  out["contention_model"] = options.contention ? nlohmann::json(options.contention->string()) : nlohmann::json();
  nlohmann::json summaries = nlohmann::json::object();
  for (const SimResult& r : table)
    if (!r.policy_summary.empty()) summaries[r.policy] = r.policy_summary;
  if (!summaries.empty()) out["policy_summaries"] = summaries;
  return out;
}

// The comparison as a table, then each policy's summary line.
std::string comparison_text(const std::vector<ComparisonRow>& rows, const std::vector<SimResult>& table) {
  std::string out = format_comparison_table(rows);
  for (const SimResult& r : table)
    if (!r.policy_summary.empty()) out += r.policy + ": " + r.policy_summary + "\n";
  return out;
}

}  // namespace

int run_simulate(const SimulateOptions& options) {
  OutputCheck check;
  check.input(options.workload, "--workload");
  for (const auto& dir : options.profile_dirs) check.input(dir, "--profiles");
  if (options.contention) check.input(*options.contention, "--contention");
  check.file(options.trace.value_or(""), "--trace")
      .file(options.csv.value_or(""), "--csv")
      .file(options.latencies_csv.value_or(""), "--latencies")
      .check(Existing::kReplace);
  std::ostream& report = report_stream(check);
  Workload workload = workload_with_flags(options);
  options.tuning.validate();
  check_simulation_size(workload);  // with the flags applied, before anything starts

  const std::vector<std::string> policies = select_policies(options.policy, workload);
  if (options.trace && policies.empty()) throw UsageError("--trace needs a policy other than 'dedicated'");
  if (options.policy == "all") {
    // Stream priority only matters for an HP client: without one, streams
    // and mps differ only by the clients' MPS shares.
    const bool any_hp = std::any_of(workload.clients.begin(), workload.clients.end(),
                                    [](const ClientSpec& c) { return c.high_priority; });
    const bool any_share = std::any_of(workload.clients.begin(), workload.clients.end(),
                                       [](const ClientSpec& c) { return c.mps_active_thread_percentage < 100; });
    if (!any_hp && !any_share)
      spdlog::info("no high-priority client and no mps_active_thread_percentage: streams and mps give the same rows");
  }

  SimOptions sim;
  if (options.contention) sim.model = load_contention_model(*options.contention);
  sim.policy = options.tuning;
  sim.max_be_wait_us = options.tuning.max_be_wait_ms * 1e3;
  spdlog::info("simulating {} client(s) on {} from {}", workload.clients.size(), workload.device.name, workload.source);
  SimResult dedicated = simulate(workload, "dedicated", sim);
  warn_about_dedicated_runs(workload, dedicated, sim.policy);
  std::vector<SimResult> results;
  ChromeTrace trace;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    const bool traced = options.trace && i == 0;
    results.push_back(simulate(workload, policies[i], sim, traced ? &trace : nullptr));
    spdlog::info("policy {}: {:.1f} s simulated, {} kernels", policies[i], results.back().simulated_s,
                 results.back().kernels);
  }
  cover_shared_windows(workload, dedicated, results, sim);
  // The dedicated run first, then the policies' (moved: each holds every
  // latency, up to 1e7 per client).
  std::vector<SimResult> table;
  table.reserve(results.size() + 1);
  table.push_back(std::move(dedicated));
  for (SimResult& r : results) table.push_back(std::move(r));
  results.clear();
  const auto rows = compare_to_dedicated(table, table.front());

  // Every output is rendered first and then written all or none.
  std::vector<std::pair<std::filesystem::path, std::string>> files;
  if (options.trace) files.emplace_back(*options.trace, trace.to_json().dump() + "\n");
  if (options.csv) files.emplace_back(*options.csv, comparison_csv(rows));
  if (options.latencies_csv) files.emplace_back(*options.latencies_csv, latencies_csv(table));
  write_files_atomically(files);
  if (options.trace) spdlog::info("wrote timeline of policy {} to {}", table.at(1).policy, options.trace->string());
  report << (options.json ? comparison_json(rows, table, workload, options).dump(2) + "\n"
                          : comparison_text(rows, table));
  return 0;
}

}  // namespace fleet::orion
