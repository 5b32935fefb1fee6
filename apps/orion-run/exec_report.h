// `orion-run exec`: the live run, and its per-client report (a table or
// JSON) on stdout when asked for.
#pragma once

#include "orion/live/exec_command.h"

namespace fleet::orion::live {

/// Runs the commands; prints the report (with --report or --alone); returns
/// the run's exit code.
int run_exec(const ExecOptions& options, bool json);

}  // namespace fleet::orion::live
