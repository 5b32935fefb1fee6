// `sailor-run launch`: starts the workers of a job on this machine, the way
// torchrun does — each a child process with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT — prefixes
// every line they log (standard error) with their rank, passes their
// standard output through whole lines at a time (only rank 0 prints
// results), stops them all when one fails and returns the first failure's
// exit code. No libtorch.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fleet::sailor::runtime {

struct LaunchCommand {
  int nprocs = 0;                     ///< 0: as many as the plan needs
  std::filesystem::path plan;         ///< passed to the workers as --plan; sizes the job without --nprocs
  int master_port = 0;                ///< 0: a free port
  double grace_seconds = 10;          ///< after a failure, SIGTERM, then SIGKILL after this long
  std::vector<std::string> arguments; ///< the worker's sailor-run subcommand and its options
  std::filesystem::path program;      ///< the worker program (default: this executable)
};

/// Runs the workers and returns 0, or the exit status of the first worker
/// that failed (128 + signal for one killed by a signal).
int run_launch(const LaunchCommand& command);

/// A TCP port on 127.0.0.1 that nothing listens on right now.
int free_local_port();

}  // namespace fleet::sailor::runtime
