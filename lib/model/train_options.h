// The options of a training run and its learning-rate schedule (AdamW,
// linear warm-up then cosine decay, clipping). The training loop itself, for
// one process or many, is sailor/runtime/torch/trainer.h. No libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/json.h"

namespace fleet::model {

/// Everything that decides the result of a run (stored in the checkpoint).
struct TrainOptions {
  std::int64_t steps = 100;
  std::int64_t batch_size = 8;         ///< sequences per micro-batch (a plan's mbs replaces it)
  std::int64_t seq_len = 128;          ///< tokens per sequence
  std::int64_t grad_accumulation = 1;  ///< micro-batches per step and data-parallel replica
  /// Sequences per optimizer step over all replicas. 0 until a run fixes it
  /// (a plan's global batch, else replicas x batch_size x grad_accumulation);
  /// a checkpoint keeps it, so a resumed run trains on the same batches
  /// whatever its layout.
  std::int64_t global_batch = 0;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  ///< the cosine ends at lr * min_lr_ratio
  std::int64_t warmup_steps = 10;
  double weight_decay = 0.1;  ///< on matrices only, not norms
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_norm = 1.0;  ///< 0: no clipping
  std::uint64_t seed = 0;
  std::string data_mode = "stream";  ///< stream: random windows of the concatenated files; lines: one sequence per line
  std::string loss_after;            ///< lines mode: train only on what follows this marker in each line

  void validate() const;
  nlohmann::json to_json() const;
  static TrainOptions from_json(const JsonValue& v);
};

/// The learning rate at `step` (0-based) of a run with `options`.
double learning_rate(const TrainOptions& options, std::int64_t step);

/// Files a model folder carries besides weights and config.
const std::vector<std::string>& tokenizer_file_names();
/// Copies those of them that exist in `from` into `to` (replacing).
void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace fleet::model
