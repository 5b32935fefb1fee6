#include "orion/report.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "common/atomic_file.h"
#include "common/csv.h"
#include "common/stats.h"

namespace fleet::orion {

namespace {

bool has_throughput_ratio(const ComparisonRow& r) { return r.outcome == "ok" || r.outcome == "overloaded"; }

// Requests of `alone` done by `t_us`, counting the one in progress then by
// the part of its service time gone (its service: from the later of its
// arrival and the previous request's end, to its own end).
double requests_done_by(const ClientResult& alone, double t_us) {
  const auto& done = alone.done_us;
  const std::size_t n = static_cast<std::size_t>(std::upper_bound(done.begin(), done.end(), t_us) - done.begin());
  if (n == done.size() || n >= alone.latencies_ms.size()) return static_cast<double>(n);
  const double arrival_us = done[n] - 1000.0 * alone.latencies_ms[n];
  const double start_us = n > 0 ? std::max(arrival_us, done[n - 1]) : arrival_us;
  const double part = done[n] > start_us ? (t_us - start_us) / (done[n] - start_us) : 0.0;
  return static_cast<double>(n) + std::clamp(part, 0.0, 1.0);
}

// What `alone` served per second over `shared`'s window. An open-loop
// client gets the same arrivals in both runs, so over the same window the
// two throughputs differ only by what the sharing cost; over their own
// windows they would differ by the arrivals each window happens to hold (a
// short shared window with a burst of Poisson arrivals showed 1.3x the
// dedicated throughput). A closed-loop client, or a window the dedicated
// run does not cover (cover_shared_windows), keeps the dedicated run's own
// figure.
double dedicated_throughput_for(const ClientResult& shared, const ClientResult& alone) {
  const double span_us = shared.window_end_us - shared.window_start_us;
  if (!shared.open_loop || !(span_us > 0) || !dedicated_run_covers(alone, shared.window_end_us) ||
      alone.window_start_us != shared.window_start_us) {
    return alone.throughput_per_s;
  }
  return requests_done_by(alone, shared.window_end_us) / (span_us / 1e6);
}

// The dedicated p99 of the requests `shared` measured. An open-loop client
// gets the same arrivals alone, in the same order (one FIFO stream), so its
// first n requests alone are the n the shared run measured in its window;
// the same requests then make the ratio, not the dedicated run's whole list
// (whose own queueing may differ along the run: a 94-request server showed
// a shared p50 below its dedicated one that way). A closed-loop client's
// iterations are alike, and keep the dedicated run's figure.
double dedicated_p99_for(const ClientResult& shared, const ClientResult& alone) {
  const std::int64_t n = shared.completed_in_window;
  if (!shared.open_loop || n <= 0 || n >= alone.completed_in_window) return alone.p99_ms;
  return summarize(std::span<const double>(alone.latencies_ms).first(static_cast<std::size_t>(n))).p99;
}

}  // namespace

std::vector<ComparisonRow> compare_to_dedicated(const std::vector<SimResult>& results, const SimResult& dedicated) {
  std::vector<ComparisonRow> rows;
  for (const SimResult& r : results) {
    for (std::size_t i = 0; i < r.clients.size(); ++i) {
      const ClientResult& c = r.clients[i];
      const ClientResult& d = dedicated.clients.at(i);
      ComparisonRow row;
      row.policy = r.policy;
      row.client = c.name;
      row.high_priority = c.high_priority;
      row.training = c.training;
      row.completed = c.completed;
      row.p50_ms = c.p50_ms;
      row.p95_ms = c.p95_ms;
      row.p99_ms = c.p99_ms;
      row.mean_ms = c.mean_ms;
      row.throughput_per_s = c.throughput_per_s;
      row.completed_in_window = c.completed_in_window;
      row.in_flight_at_window_end = c.in_flight_at_window_end;
      // The window's completions (a subset of all measured ones) are what
      // the throughput counts: they must reach the minimum for the ratios,
      // in this run and in the dedicated one the ratios divide by.
      const bool too_few = std::min(c.completed_in_window, d.completed_in_window) < kMinCompletedForRatios;
      row.outcome = c.starved ? "starved" : too_few ? "too few" : (c.overloaded || d.overloaded) ? "overloaded" : "ok";
      row.offered_load = c.offered_load;
      row.forced_admissions = c.forced_admissions;
      row.preempted = c.preempted;
      if (row.outcome == "ok") {
        const double reference = dedicated_p99_for(c, d);
        row.p99_vs_dedicated = reference > 0 ? c.p99_ms / reference : 0;
      }
      // An overloaded client's throughput is what the GPU served it: still a fair comparison.
      if (row.outcome == "ok" || row.outcome == "overloaded") {
        const double reference = dedicated_throughput_for(c, d);
        row.throughput_vs_dedicated = reference > 0 ? c.throughput_per_s / reference : 0;
      }
      // A dedicated row shows the client's own GPU, not the mean of all.
      row.busy_fraction = c.own_gpu_busy_fraction >= 0 ? c.own_gpu_busy_fraction : r.busy_fraction;
      row.sm_utilization = c.own_gpu_sm_utilization >= 0 ? c.own_gpu_sm_utilization : r.sm_utilization;
      if (c.high_priority && r.policy != "dedicated") row.corun_fraction = r.hp_corun_fraction;
      rows.push_back(row);
    }
  }
  return rows;
}

std::string format_comparison_table(const std::vector<ComparisonRow>& rows) {
  std::ostringstream out;
  out << fmt::format("{:<10} {:<22} {:<5} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10} {:>8} {:>6} {:>7}\n", "policy", "client",
                     "role", "done", "p50 ms", "p95 ms", "p99 ms", "p99/ded", "thru /s", "thru/ded", "busy%", "corun%");
  std::string last_policy;
  for (const ComparisonRow& r : rows) {
    if (!last_policy.empty() && r.policy != last_policy) out << "\n";
    last_policy = r.policy;
    // A client that completed (almost) nothing has no meaningful ratio: name the outcome.
    const std::string p99_ratio = r.outcome == "ok"           ? fmt::format("{:.2f}", r.p99_vs_dedicated)
                                  : r.outcome == "overloaded" ? std::string("overload")
                                                              : r.outcome;
    const std::string thru_ratio =
        has_throughput_ratio(r) ? fmt::format("{:.2f}", r.throughput_vs_dedicated) : r.outcome;
    // No request measured in the window: no latency to show (not a latency of 0).
    auto latency = [&](double ms) { return r.completed_in_window > 0 ? fmt::format("{:.2f}", ms) : std::string("-"); };
    out << fmt::format("{:<10} {:<22} {:<5} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10.2f} {:>8} {:>6.1f} {:>7}\n", r.policy,
                       r.client.substr(0, 22), r.high_priority ? "HP" : "BE", r.completed, latency(r.p50_ms),
                       latency(r.p95_ms), latency(r.p99_ms), p99_ratio, r.throughput_per_s, thru_ratio,
                       100.0 * r.busy_fraction,
                       r.corun_fraction >= 0 ? fmt::format("{:.1f}", 100.0 * r.corun_fraction) : std::string("-"));
  }
  return out.str();
}

nlohmann::json comparison_to_json(const std::vector<ComparisonRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const ComparisonRow& r : rows) {
    auto latency = [&](double ms) { return r.completed_in_window > 0 ? nlohmann::json(ms) : nlohmann::json(); };
    out.push_back({{"policy", r.policy},
                   {"client", r.client},
                   {"role", r.high_priority ? "high" : "best-effort"},
                   {"kind", r.training ? "training" : "inference"},
                   {"completed", r.completed},
                   {"completed_in_window", r.completed_in_window},
                   {"p50_ms", latency(r.p50_ms)},
                   {"p95_ms", latency(r.p95_ms)},
                   {"p99_ms", latency(r.p99_ms)},
                   {"mean_ms", latency(r.mean_ms)},
                   {"throughput_per_s", r.throughput_per_s},
                   {"p99_vs_dedicated", r.outcome == "ok" ? nlohmann::json(r.p99_vs_dedicated) : nlohmann::json()},
                   {"throughput_vs_dedicated",
                    has_throughput_ratio(r) ? nlohmann::json(r.throughput_vs_dedicated) : nlohmann::json()},
                   {"offered_load", r.offered_load >= 0 ? nlohmann::json(r.offered_load) : nlohmann::json()},
                   {"gpu_busy_fraction", r.busy_fraction},
                   {"sm_utilization", r.sm_utilization},
                   {"outcome", r.outcome},
                   {"forced_admissions", r.forced_admissions},
                   {"preempted", r.preempted},
                   {"in_flight_at_window_end", r.in_flight_at_window_end},
                   {"hp_corun_fraction", r.corun_fraction >= 0 ? nlohmann::json(r.corun_fraction) : nlohmann::json()}});
  }
  return {{"rows", out}};
}

std::string comparison_csv(const std::vector<ComparisonRow>& rows) {
  std::ostringstream out;
  out << "policy,client,role,kind,completed,p50_ms,p95_ms,p99_ms,mean_ms,throughput_per_s,p99_vs_dedicated,"
         "throughput_vs_dedicated,gpu_busy_fraction,sm_utilization,outcome,forced_admissions,preempted,"
         "completed_in_window,offered_load,in_flight_at_window_end,hp_corun_fraction\n";
  for (const ComparisonRow& r : rows) {
    auto latency = [&](double ms) { return r.completed_in_window > 0 ? fmt::format("{}", ms) : std::string(); };
    out << csv_escape(r.policy) << ',' << csv_escape(r.client) << ',' << (r.high_priority ? "high" : "best-effort")
        << ',' << (r.training ? "training" : "inference") << ',' << r.completed << ','
        << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", latency(r.p50_ms), latency(r.p95_ms),
                       latency(r.p99_ms), latency(r.mean_ms), r.throughput_per_s,
                       r.outcome == "ok" ? fmt::format("{}", r.p99_vs_dedicated) : "",
                       has_throughput_ratio(r) ? fmt::format("{}", r.throughput_vs_dedicated) : "", r.busy_fraction,
                       r.sm_utilization, r.outcome, r.forced_admissions, r.preempted, r.completed_in_window,
                       r.offered_load >= 0 ? fmt::format("{}", r.offered_load) : "", r.in_flight_at_window_end,
                       r.corun_fraction >= 0 ? fmt::format("{}", r.corun_fraction) : "");
  }
  return out.str();
}

std::string latencies_csv(const std::vector<SimResult>& results) {
  std::string out = "policy,client,request,latency_ms\n";
  for (const SimResult& r : results) {
    for (const ClientResult& c : r.clients) {
      for (std::size_t i = 0; i < c.latencies_ms.size(); ++i) {
        out += fmt::format("{},{},{},{}\n", csv_escape(r.policy), csv_escape(c.name), i, c.latencies_ms[i]);
      }
    }
  }
  return out;
}

}  // namespace fleet::orion
