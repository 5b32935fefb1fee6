// `orion-run exec`: starts a high-priority command and best-effort commands
// as separate processes with the interposer preloaded, schedules their
// kernel launches with a policy over shared memory, and reports per client.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "orion/policy.h"

namespace fleet::orion::live {

/// Options of `orion-run exec`.
struct ExecOptions {
  std::string policy = "orion";
  std::optional<std::string> hp;                ///< the high-priority command (shell syntax)
  std::vector<std::string> be;                  ///< best-effort commands
  std::vector<std::filesystem::path> profiles;  ///< one per command: HP first, then BE, in order
  std::string device = "h200";                  ///< GPU model for SM counts and occupancy
  PolicyOptions tuning;         ///< the policies' tunables, as simulate takes them (no online tuning here)
  double release_ahead_us = 0;  ///< LiveConfig::release_ahead_us
  /// Contention model orion charges co-running kernels with (default: the simulator's, Orion's V100 pairs).
  std::optional<std::filesystem::path> contention;
  bool hp_trains = false;       ///< the HP command trains (Orion's SM threshold rule)
  bool wait_be = false;         ///< wait for BE commands instead of stopping them after HP
  double grace_s = 5;           ///< SIGTERM to SIGKILL for stopped BE commands
  bool start_mps = false;
  bool alone = false;                        ///< after the shared run, run each command by itself to compare
  std::optional<std::filesystem::path> log;  ///< JSON lines of every scheduling event
  bool report = false;                       ///< measure per client (also with `alone`)
};

struct ExecOutcome {
  int code = 0;  ///< the HP command's exit code, else the first failing command's, else 0
  /// Per client, with `report` or `alone` (live_report.h: report_json).
  std::optional<nlohmann::json> report;
};
/// Runs the commands under the scheduler (and alone, with `alone`). Notices
/// go to stderr; the report is returned.
ExecOutcome exec_commands(const ExecOptions& options);

}  // namespace fleet::orion::live
