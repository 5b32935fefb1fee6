// Where the planner's four inputs are (a folder, or a path each) and how
// they are loaded and checked against each other.
#pragma once

#include <filesystem>

#include "sailor/estimator.h"

namespace fleet::sailor {

/// Where the four inputs are: a folder with model.json, profile.json,
/// cluster.json and job.json, each replaceable by its own path.
struct InputPaths {
  std::filesystem::path inputs;
  std::filesystem::path model, profile, cluster, job;
  /// The path of one input: the explicit one, else `inputs`/`name`.
  std::filesystem::path resolve(const std::filesystem::path& explicit_path, const char* name) const;
};

/// Loads the four inputs and checks they are about the same model.
PlannerInputs load_inputs(const InputPaths& paths);

}  // namespace fleet::sailor
