// What elastic jobs agree on without libtorch: the environment and exit
// statuses between the launcher and its workers, and the plans for the
// workers there are (the planner's search restricted to them, or a plan
// that only saves their state). The launcher, the controller and the
// workers use it; the recovery itself is torch/elastic.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sailor/plan.h"
#include "sailor/planner_inputs.h"
#include "sailor/search.h"

namespace fleet::sailor::runtime {

/// Set by the elastic launcher for its workers: SIGTERM then means "hand
/// over and leave at the next step boundary" instead of "checkpoint that
/// step and stop" (kExitTerminated), as it means for a plain job.
inline constexpr const char* kEnvElastic = "SAILOR_ELASTIC";
/// Exit status of a worker that left at a step boundary because it got SIGTERM.
inline constexpr int kExitPreempted = 75;
/// Exit status of the other workers of that job, which stopped at the same boundary.
inline constexpr int kExitStoppedWithPeers = 76;
/// Exit status of a plain (not elastic) job stopped by SIGTERM after
/// checkpointing its last finished step: 128 + SIGTERM, as a shell reports a
/// process that SIGTERM ended, and as SLURM's preemption expects.
inline constexpr int kExitTerminated = 143;
/// Exit status of an elastic job (and of its workers) when the workers left
/// admit no plan; the output folder holds a checkpoint to resume from.
inline constexpr int kExitNoPlan = 3;

/// The planner's inputs with the cluster's one GPU pool cut to `workers`
/// GPUs. InputError when the cluster has more than one pool (a machine's
/// workers are one type in one zone).
PlannerInputs restrict_to_workers(const PlannerInputs& inputs, int workers);

/// The best plan for at most `workers` GPUs under the objective and bounds
/// of `search` (its max_gpus is replaced); NoSolutionError when none fits.
Plan plan_for_workers(const PlannerInputs& inputs, int workers, SearchOptions search);

/// Where the workers left write the state they hold when they admit no plan:
/// a pipeline of one stage per worker (at most one per layer, layers split
/// evenly, no replicas, no TP) that only has to hold the parameters and
/// optimizer state, never to train.
Plan save_plan_for_workers(const Plan& last, int model_layers, int workers);

/// The value of a worker option (`-o DIR`, `--output DIR`, `--output=DIR`), if given.
std::optional<std::string> worker_option(const std::vector<std::string>& args, const std::vector<std::string>& names);

}  // namespace fleet::sailor::runtime
