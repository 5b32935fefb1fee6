#include "sailor-plan/commands.h"

#include <chrono>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json.h"
#include "sailor/search.h"
#include "sailor-plan/plan_report.h"

namespace fleet::sailor {

int run_search(const SearchCommand& c) {
  SearchOptions opt =
      search_options(c.objective, c.max_cost_per_iter, c.min_throughput, c.max_gpus, c.max_energy_per_iter);
  if (c.max_stages < 1) throw UsageError("--max-stages must be at least 1");
  OutputCheck check;
  with_inputs(check, c.paths).file(c.output.value_or(""), "--output").check(Existing::kReplace);
  std::ostream& report = report_stream(check);
  opt.top_k = c.top;
  opt.exhaustive = c.exhaustive;
  opt.max_stages = c.max_stages;
  const PlannerInputs in = load_inputs(c.paths);
  SearchStats stats;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<RankedPlan> top = search_plans(in, opt, &stats);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info(
      "searched {} plans in {:.3f} s ({} did not fit in memory, {} outside the bounds; {} configurations "
      "skipped by their bound)",
      stats.candidates, seconds, stats.memory_rejected, stats.constraint_rejected, stats.bound_pruned);
  if (c.output) {
    nlohmann::json out = plan_to_json(top.front().plan);
    out["predictions"] = estimate_to_json(top.front().plan, top.front().estimate);
    write_json_file(*c.output, out);
  }
  if (c.json) {
    nlohmann::json plans = nlohmann::json::array();
    for (const RankedPlan& r : top) {
      nlohmann::json p = plan_to_json(r.plan);
      p["predictions"] = estimate_to_json(r.plan, r.estimate);
      plans.push_back(p);
    }
    report << nlohmann::json{{"plans", plans}, {"searched", stats.candidates}, {"search_s", seconds}}.dump(2) << "\n";
    return 0;
  }
  report << "best plan (" << c.objective << "):\n" << format_report(top.front().plan, top.front().estimate);
  if (top.size() > 1) {
    report << fmt::format("\n{:>4} {:>7} {:>4} {:>3} {:>4} {:>5} {:>12} {:>12}  {}\n", "rank", "stages", "dp", "tp",
                          "mbs", "GPUs", "iter/s", "$/iter", "GPU types per stage");
    for (std::size_t i = 0; i < top.size(); ++i) {
      const RankedPlan& r = top[i];
      std::string types;
      for (const Stage& s : r.plan.stages) types += (types.empty() ? "" : ",") + s.replicas.front().gpu;
      report << fmt::format("{:>4} {:>7} {:>4} {:>3} {:>4} {:>5} {:>12.4f} {:>12.5f}  {}\n", i + 1,
                            r.plan.stages.size(), r.plan.dp(), r.plan.stages.front().tp, r.plan.mbs, r.plan.gpus(),
                            r.estimate.iterations_per_s, r.estimate.usd_per_iteration(), types);
    }
  }
  return 0;
}

}  // namespace fleet::sailor
