// Single-process training of a Llama model: AdamW, linear warm-up then cosine
// decay, gradient clipping and accumulation, atomic checkpoints of model,
// optimizer and step that resume bit-identically. Deterministic under a seed.
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
  std::int64_t batch_size = 8;       ///< sequences per micro-batch
  std::int64_t seq_len = 128;        ///< tokens per sequence
  std::int64_t grad_accumulation = 1;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;         ///< the cosine ends at lr * min_lr_ratio
  std::int64_t warmup_steps = 10;
  double weight_decay = 0.1;         ///< on matrices only, not norms
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_norm = 1.0;            ///< 0: no clipping
  std::uint64_t seed = 0;
  std::string data_mode = "stream";  ///< stream: random windows of the concatenated files; lines: one sequence per line
  std::string loss_after;            ///< lines mode: train only on what follows this marker in each line

  void validate() const;
  nlohmann::json to_json() const;
  static TrainOptions from_json(const JsonValue& v);
};

/// The learning rate at `step` (0-based) of a run with `options`.
double learning_rate(const TrainOptions& options, std::int64_t step);

/// One training run: from a model folder, or resuming the checkpoint in `output`.
struct TrainJob {
  std::filesystem::path model;           ///< model folder to start from (unused when resuming)
  std::filesystem::path output;          ///< checkpoint folder, rewritten atomically
  std::vector<std::filesystem::path> data;  ///< text files (unused when resuming: the checkpoint names them)
  TrainOptions options;
  bool resume = false;
  bool force = false;                    ///< replace a non-empty output folder (a finished run included)
  std::string device = "auto";           ///< cpu, cuda or auto; on CUDA the products run in bfloat16 (autocast)
  std::int64_t checkpoint_every = 0;     ///< steps between checkpoints (0: only at the end)
  std::int64_t stop_after = 0;           ///< stop (with a checkpoint) after this many steps of this run; 0: run to the end
  std::int64_t log_every = 10;
};

/// What a run did.
struct TrainResult {
  std::int64_t first_step = 0, last_step = 0;  ///< steps [first, last) ran
  double first_loss = 0, last_loss = 0;
  double tokens_per_second = 0;
  std::vector<double> losses;                   ///< per step of this run
};

/// Runs `job`. UsageError for bad options, InputError for unreadable data or
/// a checkpoint whose data no longer matches.
TrainResult train(const TrainJob& job);

/// Files a model folder carries besides weights and config.
const std::vector<std::string>& tokenizer_file_names();
/// Copies those of them that exist in `from` into `to` (replacing).
void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace fleet::model
