// Checkpoints written in the background while training goes on. Between two
// steps each writing rank (replica 0 of every stage) takes a copy of its
// stage's weights and optimizer state; a thread writes them as that stage's
// shards into a staging folder beside the output, then says so in the store.
// Rank 0's thread waits for every stage, writes the indexes, config.json,
// the tokenizer and trainer_state.json, and swaps the staging folder for the
// output in one atomic exchange: a crash at any moment leaves the previous
// checkpoint whole. Format: docs/training-runtime.md. Include only from
// libtorch targets.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "sailor/runtime/world.h"

namespace c10d {
class Store;
}

namespace fleet::sailor::runtime {

class Interrupt;

/// What one rank writes for one checkpoint: copies taken between steps.
struct CheckpointSnapshot {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, torch::Tensor>> model,
      optimizer;  ///< contiguous float32 CPU copies (writing ranks)
  /// Rank 0: the files beside the weights.
  std::string config_json;
  nlohmann::json trainer_state;
  std::filesystem::path tokenizer_source;
};

/// Size and FNV-1a digest of every safetensors file in the checkpoint folder
/// `dir`, as trainer_state.json's "files" keeps them: {name: {bytes, fnv1a64}}.
nlohmann::json checkpoint_file_digests(const std::filesystem::path& dir);
/// Checks the files of checkpoint `dir` against `state`'s "files" (a state
/// without them, from an older version, is taken as it is); InputError
/// naming the damaged or missing file.
void verify_checkpoint_files(const std::filesystem::path& dir, const nlohmann::json& state);

class CheckpointWriter {
 public:
  /// `writers`: the ranks that write shards, in stage order (writers[s] writes stage s).
  /// `token` names this job's staging folders and store keys (equal on every rank).
  CheckpointWriter(std::filesystem::path output, const WorldInfo& world, std::vector<int> writers, std::string token,
                   std::chrono::milliseconds timeout);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Waits for the write in flight, then writes `snapshot` in the background.
  void write_async(CheckpointSnapshot snapshot);
  /// Waits for the write in flight; rethrows its failure.
  void wait();
  /// Rank 0 stops waiting for the other stages' shards when `interrupt` is
  /// raised (an elastic generation ended: they may never come).
  void set_interrupt(const Interrupt* interrupt) { interrupt_ = interrupt; }
  /// Seconds the last finished write took.
  double last_write_seconds() const { return last_seconds_; }

  /// Staging folders of earlier jobs that never committed (rank 0 removes them at start).
  static void remove_stale_staging(const std::filesystem::path& output);

 private:
  void write(const CheckpointSnapshot& snapshot);
  void write_into(const CheckpointSnapshot& snapshot, const std::filesystem::path& dir);
  std::filesystem::path staging(std::int64_t step) const;

  std::filesystem::path output_;
  WorldInfo world_;
  std::vector<int> writers_;
  int stage_ = -1;  ///< the stage this rank writes, -1 for none
  std::string token_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;  ///< a client of its own: the training thread uses the other
  std::thread thread_;
  std::exception_ptr failure_;
  std::atomic<bool> cancelled_{false};
  const Interrupt* interrupt_ = nullptr;
  double last_seconds_ = 0;
};

}  // namespace fleet::sailor::runtime
