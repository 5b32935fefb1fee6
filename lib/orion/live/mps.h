// CUDA MPS for `orion-run exec`: kernels of different processes only run at
// the same time on one GPU when the MPS control daemon multiplexes them.
// Detects a running daemon, or starts a private one for the children.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fleet::orion::live {

/// What the children need to reach MPS, and what to tell the user.
struct MpsEnvironment {
  bool running = false;        ///< a control daemon answers
  bool started_by_us = false;  ///< we started it and stop it at the end
  std::string pipe_directory;
  std::string private_directory;  ///< our temporary folder (pipes and logs), removed at the end
  std::vector<std::pair<std::string, std::string>> variables;  ///< environment for the children
  std::string notice;                                          ///< said once on stderr when MPS is not running
};

/// Finds a running daemon (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps)
/// or, with `start`, starts nvidia-cuda-mps-control -d in a private folder.
/// InputError when `start` is asked and the control program is missing;
/// RuntimeFailure when it does not come up.
MpsEnvironment prepare_mps(bool start);
/// Stops a daemon prepare_mps started; nothing otherwise.
void stop_mps(MpsEnvironment& mps);

}  // namespace fleet::orion::live
