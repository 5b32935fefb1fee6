// Entry points of `sailor-run train` (one rank of a job, or the whole job in
// one process). Torch-free header: the program includes it.
#pragma once

#include <string>

#include "common/cli.h"
#include "sailor/runtime/launcher.h"
#include "sailor/runtime/trainer.h"

namespace fleet::sailor::runtime {

struct TrainCommand {
  TrainJob job;
  int threads = 0;  ///< 0: libtorch's default
  bool json = false;
};
int run_train(const TrainCommand& command);

/// `launch` (workers on this machine, elastic or not), `join` (ask a running
/// elastic job for more workers) and `status` (a running elastic job's
/// generation, plan and members).
struct LaunchCommands {
  LaunchCommand launch;
  LaunchCommand controller;  ///< `sailor-run controller`: the workers start elsewhere
  std::string address;       ///< HOST:PORT of an elastic job's controller (join, status)
  int join_workers = 1;
  bool json = false;
};
void add_launch_commands(Tool& tool, LaunchCommands& commands);

}  // namespace fleet::sailor::runtime
