// Entry points of `sailor-run train` (one rank of a job, or the whole job in
// one process). Torch-free header: the program includes it.
#pragma once

#include "sailor/runtime/trainer.h"

namespace fleet::sailor::runtime {

struct TrainCommand {
  TrainJob job;
  int threads = 0;  ///< 0: libtorch's default
  bool json = false;
};
int run_train(const TrainCommand& command);

}  // namespace fleet::sailor::runtime
