#include "sailor/runtime/elastic_plan.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"

namespace fleet::sailor::runtime {

PlannerInputs restrict_to_workers(const PlannerInputs& inputs, int workers) {
  PlannerInputs in = inputs;
  std::vector<std::pair<std::string, std::string>> pools;
  for (auto& [gpu, zones] : in.cluster.quotas) {
    for (auto& [zone, count] : zones) {
      if (count > 0) pools.emplace_back(gpu, zone);
    }
  }
  if (pools.size() != 1) {
    throw InputError(
        fmt::format("--elastic on one machine needs a cluster with one GPU pool (one type in one zone); "
                    "this one has {}",
                    pools.size()));
  }
  in.cluster.quotas[pools[0].first][pools[0].second] = workers;
  return in;
}

Plan plan_for_workers(const PlannerInputs& inputs, int workers, SearchOptions search) {
  search.max_gpus = workers;
  search.top_k = 1;
  // The planner cannot tell whether the model ties its embedding and head
  // (then the first and last stage need one TP degree): keep one for all.
  search.one_tp = true;
  SearchStats stats;
  const std::vector<RankedPlan> plans = search_plans(restrict_to_workers(inputs, workers), search, &stats);
  const Plan& plan = plans.front().plan;
  if (plan.gpus() < workers && stats.unpriced_links > 0) {
    // Larger plans may be faster but could not be priced: say what to measure.
    spdlog::warn(
        "the plan uses {} of the {} workers: plans on more need a link the cluster has no bandwidth fit "
        "for ({}); measure it with sailor-run profile-net --link-class, run on GPUs of two nodes",
        plan.gpus(), workers, stats.first_unpriced_link);
  }
  return plan;
}

Plan save_plan_for_workers(const Plan& last, int model_layers, int workers) {
  if (workers < 1 || model_layers < 1 || last.stages.empty() || last.stages.front().replicas.empty())
    throw UsageError("a save plan needs workers, layers and a plan to take the GPU type from");
  Plan plan;
  plan.mbs = last.mbs;
  plan.global_batch = last.global_batch;
  const int stages = std::min(workers, model_layers);
  Replica replica = last.stages.front().replicas.front();
  replica.node = -1;
  for (int s = 0; s < stages; ++s) {
    Stage stage;
    stage.first_layer = s * model_layers / stages;
    stage.last_layer = (s + 1) * model_layers / stages;
    stage.replicas = {replica};
    plan.stages.push_back(stage);
  }
  return plan;
}

std::optional<std::string> worker_option(const std::vector<std::string>& args, const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    for (const std::string& n : names) {
      if (args[i] == n && i + 1 < args.size()) return args[i + 1];
      if (args[i].rfind(n + "=", 0) == 0) return args[i].substr(n.size() + 1);
    }
  }
  return std::nullopt;
}

}  // namespace fleet::sailor::runtime
