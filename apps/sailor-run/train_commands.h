// The options of `sailor-run train`, `profile` and `profile-net`: training
// on one process or as a rank of a job, and measuring this machine for the
// planner.
#pragma once

#include <string>
#include <vector>

#include "cli/cli.h"
#include "sailor/runtime/torch/network_profile.h"
#include "sailor/runtime/torch/profiler.h"
#include "sailor/runtime/torch/trainer.h"

namespace fleet {
namespace sailor::runtime {

/// `sailor-run train`: one rank of a job, or the whole job in one process.
struct TrainCommand {
  TrainJob job;
  int threads = 0;  ///< 0: libtorch's default
  bool json = false;
};
/// Trains, and prints the losses (rank 0); the exit code of a stopped run.
int run_train(const TrainCommand& command);
/// `profile`: measures, and rank 0 prints the totals per (TP, mbs), or JSON.
int run_profile(const ProfileCommand& command, bool json);
/// `profile-net`: measures, and rank 0 prints the fitted curve, or the cluster.json.
int run_network_profile(const NetworkProfileCommand& command, bool json);

}  // namespace sailor::runtime

struct TrainCommands {
  sailor::runtime::TrainCommand train;
  std::vector<std::string> data;  ///< --data, as given
  sailor::runtime::ProfileCommand profile;
  bool profile_json = false;
  sailor::runtime::NetworkProfileCommand net;
  bool net_json = false;
};
void add_train_commands(Tool& tool, TrainCommands& commands);

}  // namespace fleet
