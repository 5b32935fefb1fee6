// What several of sailor-plan's subcommands share: registering the planner
// inputs with an output check, loading a plan checked against the inputs,
// and the report of a plan with its predictions.
#pragma once

#include <filesystem>
#include <string>

#include "common/output_check.h"
#include "sailor/estimator.h"
#include "sailor/plan.h"
#include "sailor/planner_inputs.h"

namespace fleet::sailor {

/// Registers the four planner inputs (and `plan`, when given) with `check`.
OutputCheck& with_inputs(OutputCheck& check, const InputPaths& p, const std::filesystem::path& plan = {});
/// The plan at `path`, validated against the inputs, its replicas packed into nodes.
Plan load_valid_plan(const std::filesystem::path& path, const PlannerInputs& in);
/// The human-readable report of a plan and its predictions.
std::string format_report(const Plan& plan, const Estimate& est);

}  // namespace fleet::sailor
