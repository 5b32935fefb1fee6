#include "sailor/planner_inputs.h"

#include <spdlog/spdlog.h>

#include "common/error.h"

namespace fleet::sailor {

std::filesystem::path InputPaths::resolve(const std::filesystem::path& explicit_path, const char* name) const {
  if (!explicit_path.empty()) return explicit_path;
  if (inputs.empty()) throw UsageError(std::string("give --inputs DIR or --") + name);
  return inputs / (std::string(name) + ".json");
}

PlannerInputs load_inputs(const InputPaths& p) {
  PlannerInputs in;
  in.model = load_model_spec(p.resolve(p.model, "model"));
  in.profiles = load_profile_set(p.resolve(p.profile, "profile"));
  in.cluster = load_cluster_spec(p.resolve(p.cluster, "cluster"));
  in.job = load_job_spec(p.resolve(p.job, "job"));
  if (in.profiles.model != in.model.name) {
    throw InputError("profile is for model '" + in.profiles.model + "' but the model is '" + in.model.name + "'");
  }
  if (in.job.model != in.model.name) {
    throw InputError("job is for model '" + in.job.model + "' but the model is '" + in.model.name + "'");
  }
  for (const std::string& note : complete_profiles(in.profiles, in.model)) spdlog::warn("{}", note);
  if (const auto note = monotone_in_batch_size(in.profiles)) spdlog::debug("{}", *note);
  return in;
}

}  // namespace fleet::sailor
