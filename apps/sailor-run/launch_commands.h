// The options of `sailor-run launch`, `controller`, `join` and `status`:
// workers on this machine (elastic or not), an elastic job's coordinator
// for workers started elsewhere, and the two requests to a running job.
#pragma once

#include "cli/cli.h"
#include "sailor/runtime/launcher.h"

namespace fleet {
namespace sailor::runtime {

/// A running elastic job's controller, as `join` and `status` address it.
struct JobAddress {
  std::string address;   ///< HOST:PORT of the controller
  int join_workers = 1;  ///< join: workers to ask for
  bool json = false;     ///< status: the JSON record instead of words
};
/// `join`: asks the job for more workers (they start at its next step boundary).
int run_join(const JobAddress& command);
/// `status`: prints the job's generation, plan and members.
int run_status(const JobAddress& command);

}  // namespace sailor::runtime

struct LaunchCommands {
  sailor::runtime::LaunchCommand launch;
  sailor::runtime::LaunchCommand controller;  ///< `controller`: the workers start elsewhere
  sailor::runtime::JobAddress job;            ///< `join` and `status`
};
void add_launch_commands(Tool& tool, LaunchCommands& commands);

}  // namespace fleet
