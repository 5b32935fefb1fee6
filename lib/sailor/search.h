// Plan search: over GPU types x zones within quotas, pipeline degree and
// layer split, tensor-parallel degree, data-parallel degree and micro-batch
// size, for the highest throughput or the lowest cost or energy per
// iteration, within bounds on the others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sailor/estimator.h"
#include "sailor/plan.h"

namespace fleet::sailor {

/// What to optimise.
enum class Objective { kThroughput, kCost, kEnergy };

/// Search settings.
struct SearchOptions {
  Objective objective = Objective::kThroughput;
  double max_cost_per_iteration = 0;    ///< $ per iteration, 0: no bound
  double min_throughput = 0;            ///< iterations per second, 0: no bound
  double max_energy_per_iteration = 0;  ///< joules per iteration, 0: no bound
  int max_gpus = 0;                     ///< 0: no bound
  int top_k = 1;                        ///< plans to keep
  bool exhaustive = false;              ///< every stage-pool sequence, spill pool, TP per pool, split and DP degree
  int max_stages = 16;                  ///< pipeline degrees tried: 1..max_stages
  bool one_tp = false;             ///< one TP degree for every stage (what sailor-run trains); else one per GPU pool
  bool exact_small_spaces = true;  ///< after the heuristic, branch and bound over the whole space when it is small
};

/// A plan with its predictions.
struct RankedPlan {
  Plan plan;
  Estimate estimate;
};

/// Search statistics.
struct SearchStats {
  std::uint64_t candidates = 0;  ///< plans simulated
  std::uint64_t memory_rejected = 0;
  std::uint64_t constraint_rejected = 0;
  std::uint64_t unpriced_links = 0;  ///< plans needing a link without a bandwidth fit
  std::string first_unpriced_link;   ///< what the first of them lacked ("cluster has no same_zone bandwidth ...")
  std::uint64_t bound_pruned = 0;    ///< configurations skipped because even their best case ranks too low
  std::uint64_t beyond_bounds = 0;   ///< of those, the ones whose best case misses the user's bounds
};

/// The best plans, best first (at most top_k). NoSolutionError with the
/// reason when no plan fits memory or meets the bounds; UsageError when an
/// exhaustive search would be too large.
std::vector<RankedPlan> search_plans(const PlannerInputs& inputs, const SearchOptions& options,
                                     SearchStats* stats = nullptr);

/// Search settings from their command-line form (`sailor-plan search`,
/// `sailor-run launch --elastic`): objective "throughput", "cost" or
/// "energy", bounds of 0 meaning none. UsageError naming the option otherwise.
SearchOptions search_options(const std::string& objective, double max_cost_per_iteration, double min_throughput,
                             int max_gpus, double max_energy_per_iteration = 0);

/// True when `a` ranks before `b` under the objective.
bool better(const Estimate& a, const Estimate& b, Objective objective);

}  // namespace fleet::sailor
