// Training a Llama model in one process or many: `sailor-run train`. With
// several ranks (sailor-run launch, torchrun, srun) it runs a plan's layout
// — pipeline stages scheduled 1F1B with activations and gradients sent
// point to point, data-parallel replicas whose gradients are summed in
// buckets — or, without a plan, plain data parallelism. The global batch,
// its sequences, the loss normalisation and the learning-rate schedule do not
// depend on the layout, so every layout trains the same model as one
// process. Checkpoints are Hugging Face model folders (one weight shard per
// stage) plus the optimizer state, and resume under any layout. No libtorch
// in this header.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/train_options.h"

namespace fleet::sailor::runtime {

/// One training run: from a model folder, or resuming the checkpoint in `output`.
struct TrainJob {
  std::filesystem::path model;              ///< model folder to start from (unused when resuming)
  std::filesystem::path output;             ///< checkpoint folder, rewritten atomically
  std::vector<std::filesystem::path> data;  ///< text files (unused when resuming: the checkpoint names them)
  model::TrainOptions options;
  std::filesystem::path plan;  ///< a sailor-plan plan; empty: data parallelism over the ranks
  bool resume = false;
  bool force = false;                 ///< replace a non-empty output folder (a finished run included)
  std::string device = "auto";        ///< cpu, cuda or auto; on CUDA the products run in bfloat16 (autocast)
  std::int64_t checkpoint_every = 0;  ///< steps between checkpoints (0: only at the end)
  std::int64_t stop_after = 0;        ///< stop (with a checkpoint) after this many steps of this run; 0: to the end
  std::int64_t log_every = 10;
  std::filesystem::path metrics;  ///< JSON lines, one object per step (rank 0 writes it); empty: none
  std::filesystem::path trace;    ///< Perfetto trace of the run's last step (rank 0 writes it); empty: none
  double timeout_seconds = 300;   ///< rendezvous and collective timeout
};

/// What a run did (on rank 0: the whole job's losses).
struct TrainResult {
  std::int64_t first_step = 0, last_step = 0;  ///< steps [first, last) ran
  double first_loss = 0, last_loss = 0;
  double tokens_per_second = 0;
  std::vector<double> losses;  ///< per step of this run
  int rank = 0, world_size = 1;
  std::string layout;  ///< Layout::describe()
  int stop_code = 0;   ///< kExitPreempted / kExitStoppedWithPeers: left at a step boundary (elastic.h)
};

/// Runs `job` as this process's rank of the job the environment describes
/// (world size 1 without one). UsageError for bad options, plans or
/// inconsistent workers; InputError for unreadable data or a checkpoint
/// whose data changed; RuntimeFailure when a peer is lost or times out.
TrainResult train(const TrainJob& job);

}  // namespace fleet::sailor::runtime
