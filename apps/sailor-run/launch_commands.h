// The options of `sailor-run launch`, `controller`, `join` and `status`:
// workers on this machine (elastic or not), an elastic job's coordinator
// for workers started elsewhere, and the two requests to a running job.
#pragma once

#include "cli/cli.h"
#include "sailor/runtime/commands.h"
#include "sailor/runtime/launcher.h"

namespace fleet {

struct LaunchCommands {
  sailor::runtime::LaunchCommand launch;
  sailor::runtime::LaunchCommand controller;  ///< `controller`: the workers start elsewhere
  sailor::runtime::JobAddress job;            ///< `join` and `status`
};
void add_launch_commands(Tool& tool, LaunchCommands& commands);

}  // namespace fleet
