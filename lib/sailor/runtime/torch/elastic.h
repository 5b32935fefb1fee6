// Elastic jobs (`sailor-run launch --elastic INPUTS`, `sailor-run
// controller`): when workers are lost, leave or join, re-plan for the
// workers there are with the planner's search over the job's inputs, and
// continue the run under the new plan. Recovery "inplace" keeps the
// survivors and hands their state over (the controller serves the store the
// protocol runs through: control_store.h, elastic_worker.h); "restart" stops
// every worker and restarts them from the last checkpoint (what torchrun's
// elastic agent does). Torch-free header; built with the libtorch runtime,
// whose c10d store the controller serves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sailor/estimator.h"
#include "sailor/plan.h"
#include "sailor/runtime/elastic_plan.h"
#include "sailor/runtime/launcher.h"
#include "sailor/search.h"

namespace fleet::sailor::runtime {

/// Runs an elastic job (launcher.h's LaunchCommand with elastic_inputs set);
/// returns the exit code: 0 when training finished, 3 when the workers left
/// admit no plan (the last checkpoint stays in the output folder).
int run_elastic_launch(const LaunchCommand& command);

}  // namespace fleet::sailor::runtime
