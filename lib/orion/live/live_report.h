// What `orion-run exec --report` prints: per command, request latencies,
// throughput over the window every command ran in, and the scheduler's
// gating, as JSON and as the same fixed-width table `orion-run simulate`
// prints (docs/formats.md, "orion-run exec shared segment and log").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orion/live/live_scheduler.h"

namespace fleet::orion::live {

/// A command's requests inside the common window: from its own first event
/// to the earliest last event of any command (the first command to stop),
/// those that ended inside it. A best-effort command that runs on alone
/// after the HP command (`--wait-be`), or an HP command whose BE command
/// died early, is thus neither credited with time it had the GPU to itself
/// nor given latencies measured alone as shared ones.
struct CommonWindow {
  std::int64_t completed = 0;        ///< requests that ended inside the window
  double per_s = 0;                  ///< completed / the window's length; 0 for an empty window
  std::vector<double> latencies_ms;  ///< the latencies of those requests
  /// Requests begun before the window's end that ended after it: their age
  /// at the end, a floor for the figures (summarize_with_lower_bounds); and
  /// requests begun inside the window whose process left after it without
  /// an end marker (a best-effort command stopped at the end), likewise.
  std::vector<double> in_flight_ages_ms;
};
CommonWindow common_window(const std::vector<LiveClientStats>& stats, std::size_t i);

/// One line for the user when a best-effort command ended the common window
/// (it died, or finished its work, before the HP command): the report's
/// figures then leave out what the others did after it, and the line says
/// how much ("hp: 23 of 60 requests in it"). Empty when the HP command, or
/// nobody's left-out requests, ended it.
std::string early_window_end_notice(const std::vector<LiveClientStats>& stats);

/// "ok"; "no requests" (the command posted no request markers: it has no
/// latencies and no request throughput, only its launch rate); "too few"
/// (fewer than kMinCompletedForRatios requests in the window, as the
/// simulator's table says: figures of one or two requests are noise).
std::string report_outcome(const LiveClientStats& s, const CommonWindow& window);

/// {"rows": [...]}, one row per command in slot order; latencies (of the
/// requests in the common window) and throughput are null for a command
/// with no requests, latencies also when none ended in the window. With `alone` (each
/// command's stats from a run by itself, same order), its rows come first
/// as policy "alone", and each row of the shared run gets p99_vs_alone and
/// throughput_vs_alone, null unless both runs are "ok" (the outcome says
/// "too few" when the run alone had too few).
nlohmann::json report_json(const std::vector<LiveClientStats>& stats, const std::string& policy,
                           const std::vector<LiveClientStats>& alone = {});
/// The rows of report_json as a table for a terminal ("-" where null), in
/// the shape of `orion-run simulate`'s (with p99/alone and thru/alone when
/// the report has runs alone).
std::string report_table(const nlohmann::json& report);

}  // namespace fleet::orion::live
