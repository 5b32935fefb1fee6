// The options of `sailor-run train`, `profile` and `profile-net`: training
// on one process or as a rank of a job, and measuring this machine for the
// planner.
#pragma once

#include <string>
#include <vector>

#include "cli/cli.h"
#include "sailor/runtime/commands.h"
#include "sailor/runtime/network_profile.h"
#include "sailor/runtime/profiler.h"

namespace fleet {

struct TrainCommands {
  sailor::runtime::TrainCommand train;
  std::vector<std::string> data;  ///< --data, as given
  sailor::runtime::ProfileCommand profile;
  sailor::runtime::NetworkProfileCommand net;
};
void add_train_commands(Tool& tool, TrainCommands& commands);

}  // namespace fleet
