// Entry points of `sailor-run train` (one rank of a job, or the whole job in
// one process), `join` and `status`. Torch-free header: the program includes
// it; its options are defined in apps/sailor-run.
#pragma once

#include <string>

#include "sailor/runtime/launcher.h"
#include "sailor/runtime/trainer.h"

namespace fleet::sailor::runtime {

struct TrainCommand {
  TrainJob job;
  int threads = 0;  ///< 0: libtorch's default
  bool json = false;
};
int run_train(const TrainCommand& command);

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

}  // namespace fleet::sailor::runtime
