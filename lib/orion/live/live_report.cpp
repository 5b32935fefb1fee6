#include "orion/live/live_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/stats.h"
#include "orion/simulator.h"

namespace fleet::orion::live {

namespace {

// The command whose last event came first among those that ran: its end is
// the common window's end. Null when none ran.
const LiveClientStats* first_to_end(const std::vector<LiveClientStats>& stats) {
  const LiveClientStats* first = nullptr;
  for (const LiveClientStats& s : stats) {
    if (s.first_ns != 0 && (first == nullptr || s.last_ns < first->last_ns)) first = &s;
  }
  return first;
}

}  // namespace

CommonWindow common_window(const std::vector<LiveClientStats>& stats, std::size_t i) {
  const LiveClientStats* ended_first = first_to_end(stats);
  const std::int64_t end_ns = ended_first == nullptr ? 0 : ended_first->last_ns;
  const LiveClientStats& c = stats.at(i);
  if (c.first_ns == 0 || end_ns <= c.first_ns) return {};
  CommonWindow w;
  // By time, not by position: the processes of one command post their
  // requests to separate rings, so the ends need not be in order.
  for (std::size_t r = 0; r < c.request_end_ns.size() && r < c.latencies_ms.size(); ++r) {
    if (c.request_end_ns[r] <= end_ns) {
      w.latencies_ms.push_back(c.latencies_ms[r]);
      continue;
    }
    // Still in flight when the window closed: it had been running that long.
    const double age_ms = c.latencies_ms[r] - (c.request_end_ns[r] - end_ns) / 1e6;
    if (age_ms > 0) w.in_flight_ages_ms.push_back(age_ms);
  }
  // Begun but never ended: the process left first (a best-effort command is
  // stopped when the HP command is done). One begun before the window's end
  // (its begin marker is one of the command's events, so never before the
  // window's start) and left after it was still running then; one whose
  // process left inside the window was abandoned, not in flight, and has
  // no latency.
  for (const LiveClientStats::Unfinished& u : c.unfinished_requests) {
    if (u.begin_ns < end_ns && u.left_ns >= end_ns) {
      w.in_flight_ages_ms.push_back((end_ns - u.begin_ns) / 1e6);
    }
  }
  w.completed = static_cast<std::int64_t>(w.latencies_ms.size());
  w.per_s = static_cast<double>(w.completed) / ((end_ns - c.first_ns) / 1e9);
  return w;
}

std::string early_window_end_notice(const std::vector<LiveClientStats>& stats) {
  const LiveClientStats* ended_first = first_to_end(stats);
  if (ended_first == nullptr || ended_first->high_priority) return "";
  std::int64_t start_ns = 0;
  for (const LiveClientStats& s : stats) {
    if (s.first_ns != 0) start_ns = start_ns == 0 ? s.first_ns : std::min(start_ns, s.first_ns);
  }
  std::string left_out;
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const std::int64_t in_window = common_window(stats, i).completed;
    if (stats[i].requests > in_window) {
      left_out += fmt::format("{}{}: {} of {} requests in it", left_out.empty() ? "" : ", ", stats[i].name, in_window,
                              stats[i].requests);
    }
  }
  if (left_out.empty()) return "";
  return fmt::format("{} ended first, {:.1f} s after the start: the report covers the window all commands ran in ({})",
                     ended_first->name, (ended_first->last_ns - start_ns) / 1e9, left_out);
}

std::string report_outcome(const LiveClientStats& s, const CommonWindow& window) {
  if (s.requests == 0) return "no requests";
  return window.completed < kMinCompletedForRatios ? "too few" : "ok";
}

namespace {

nlohmann::json rows_of(const std::vector<LiveClientStats>& stats, const std::string& policy) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const LiveClientStats& s = stats[i];
    const CommonWindow window = common_window(stats, i);
    const bool measured = s.requests > 0;
    // Requests still in flight at the window's end hold the figures up by
    // their age then, as in the simulator's report.
    const Summary figures = summarize_with_lower_bounds(window.latencies_ms, window.in_flight_ages_ms);
    auto latency = [&](double ms) { return window.completed > 0 ? nlohmann::json(ms) : nlohmann::json(); };
    const double span_s = (s.last_ns - s.first_ns) / 1e9;
    rows.push_back({{"policy", policy},
                    {"client", s.name},
                    {"role", s.high_priority ? "high" : "best-effort"},
                    {"outcome", report_outcome(s, window)},
                    {"processes", s.processes},
                    {"lost_processes", s.lost_processes},
                    {"requests", s.requests},
                    {"completed_in_window", window.completed},
                    {"in_flight_at_window_end", window.in_flight_ages_ms.size()},
                    {"p50_ms", latency(figures.p50)},
                    {"p95_ms", latency(figures.p95)},
                    {"p99_ms", latency(figures.p99)},
                    {"throughput_per_s", measured ? nlohmann::json(window.per_s) : nlohmann::json()},
                    {"kernels", s.kernels},
                    {"kernels_per_s", span_s > 0 ? s.kernels / span_s : 0},
                    {"kernels_not_in_profile", s.unmatched},
                    {"kernels_held", s.held},
                    {"kernels_released_ahead", s.released_ahead},
                    {"kernels_forced", s.forced},
                    {"held_ms", s.held_ms}});
  }
  return rows;
}

}  // namespace

nlohmann::json report_json(const std::vector<LiveClientStats>& stats, const std::string& policy,
                           const std::vector<LiveClientStats>& alone) {
  nlohmann::json shared = rows_of(stats, policy);
  if (alone.empty()) return {{"rows", shared}};
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < alone.size(); ++i) rows.push_back(rows_of({alone[i]}, "alone")[0]);
  for (std::size_t i = 0; i < shared.size(); ++i) {
    nlohmann::json& r = shared[i];
    const nlohmann::json& a = rows.at(i);
    r["p99_vs_alone"] = nullptr;
    r["throughput_vs_alone"] = nullptr;
    if (r["outcome"] == "ok" && a["outcome"] != "ok") r["outcome"] = "too few";
    if (r["outcome"] == "ok") {
      const double a_p99 = a["p99_ms"].get<double>(), a_thru = a["throughput_per_s"].get<double>();
      if (a_p99 > 0) r["p99_vs_alone"] = r["p99_ms"].get<double>() / a_p99;
      if (a_thru > 0) r["throughput_vs_alone"] = r["throughput_per_s"].get<double>() / a_thru;
    }
    rows.push_back(r);
  }
  return {{"rows", rows}};
}

std::string report_table(const nlohmann::json& report) {
  auto number = [](const nlohmann::json& v) {
    return v.is_null() ? std::string("-") : fmt::format("{:.2f}", v.get<double>());
  };
  bool with_alone = false;
  for (const auto& r : report["rows"]) with_alone = with_alone || r.contains("p99_vs_alone");
  // A ratio the run has no figure for says why, as the simulator's table
  // does ("-" for no requests: the outcome column says so).
  auto ratio = [&](const nlohmann::json& r, const char* key) -> std::string {
    if (!with_alone) return "";
    const std::string outcome = r["outcome"].get<std::string>();
    const std::string missing = outcome == "no requests" ? "-" : outcome;
    if (!r.contains(key)) return fmt::format(" {:>10}", outcome == "ok" ? "1.00" : missing);  // a run alone
    return fmt::format(" {:>10}", r[key].is_null() ? missing : number(r[key]));
  };
  std::string out = fmt::format(
      "{:<10} {:<22} {:<5} {:>7} {:>9} {:>9} {:>9}{} {:>10}{} {:>9} {:>9} {:>9}  {}\n", "policy", "client", "role",
      "done", "p50 ms", "p95 ms", "p99 ms", with_alone ? fmt::format(" {:>10}", "p99/alone") : "", "thru /s",
      with_alone ? fmt::format(" {:>10}", "thru/alone") : "", "kernels", "held", "held ms", "outcome");
  std::string last_policy;
  for (const auto& r : report["rows"]) {
    const std::string policy = r["policy"].get<std::string>();
    if (!last_policy.empty() && policy != last_policy) out += "\n";
    last_policy = policy;
    out += fmt::format("{:<10} {:<22} {:<5} {:>7} {:>9} {:>9} {:>9}{} {:>10}{} {:>9} {:>9} {:>9.1f}  {}\n", policy,
                       r["client"].get<std::string>().substr(0, 22), r["role"] == "high" ? "HP" : "BE",
                       r["requests"].get<std::int64_t>(), number(r["p50_ms"]), number(r["p95_ms"]), number(r["p99_ms"]),
                       ratio(r, "p99_vs_alone"), number(r["throughput_per_s"]), ratio(r, "throughput_vs_alone"),
                       r["kernels"].get<std::int64_t>(), r["kernels_held"].get<std::int64_t>(),
                       r["held_ms"].get<double>(), r["outcome"].get<std::string>());
  }
  return out;
}

}  // namespace fleet::orion::live
