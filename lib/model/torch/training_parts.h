// The pieces every training loop shares, whatever its layout: the token data
// of a run, the global batch of a step (each sequence drawn from its own
// seeded stream, so how a batch is split never changes what it holds), the
// loss normalised over the whole global batch, AdamW and its state files.
// Include only from libtorch targets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "model/llama_config.h"
#include "model/train_options.h"

namespace fleet::text {
class Tokenizer;
}

namespace fleet::model {

/// The token data of a run, in the form its data mode samples from.
struct TrainingData {
  std::vector<std::int64_t> stream;                    ///< stream mode
  std::vector<std::vector<std::int64_t>> lines;        ///< lines mode
  std::vector<std::int64_t> prompt_lengths;            ///< lines mode: tokens not trained on
  std::uint64_t fingerprint = 1469598103934665603ull;  ///< FNV-1a over every token

  void hash(std::uint64_t value) {
    fingerprint ^= value;
    fingerprint *= 1099511628211ull;
  }
};

/// Tokenizes the training files. UsageError without files, InputError for
/// ids beyond the vocabulary or too little text.
TrainingData load_training_data(const std::vector<std::filesystem::path>& files, const text::Tokenizer& tokenizer,
                                const LlamaConfig& config, const TrainOptions& options);

/// Token ids [n, T] and loss mask [n, T] (float32) of sequences
/// [first, first + n) of step `step`'s global batch.
struct Batch {
  torch::Tensor tokens, mask;
};
/// Sequence i of a step comes from a generator seeded by (seed, step, i)
/// alone, so any split of the global batch into replicas and micro-batches
/// sees the same sequences.
Batch sample_sequences(const TrainingData& data, const TrainOptions& options, std::int64_t step, std::int64_t first,
                       std::int64_t n, std::int64_t pad_id);
/// Tokens that carry loss in the whole global batch of `step` (sequences
/// [0, global_batch)): the divisor of every micro-batch's loss.
std::int64_t loss_tokens(const TrainingData& data, const TrainOptions& options, std::int64_t step,
                         std::int64_t global_batch);

/// Σ cross-entropy over the masked targets of `logits` [n, T, V] for
/// `tokens` / `mask` [n, T], divided by `divisor` (the global batch's
/// loss tokens): summed over all micro-batches it is the mean loss of the
/// global batch, however the batch was split.
torch::Tensor batch_loss(const torch::Tensor& logits, const Batch& batch, double divisor);

/// AdamW with decoupled weight decay on matrices; moments in float32 like
/// the parameters. Works on any subset of a model's parameters.
class AdamW {
 public:
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainOptions& options);
  /// One update with the gradients in the parameters' .grad(); `t` counts from 1.
  void step(double lr, std::int64_t t);
  /// Moments as named tensors: exp_avg.<name>, exp_avg_sq.<name>.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  /// Reads the moments of every parameter from optimizer.safetensors, or
  /// from the shards an optimizer.safetensors.index.json names, in `dir`.
  /// `slice` (optional) turns a stored moment into this rank's part of it.
  void load(const std::filesystem::path& dir,
            const std::function<torch::Tensor(const std::string&, const torch::Tensor&)>& slice = {});

 private:
  TrainOptions options_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_, exp_avg_, exp_avg_sq_;
};

/// Σ g² (float64) over the gradients of `params`.
double gradient_sum_of_squares(const std::vector<std::pair<std::string, torch::Tensor>>& params);
/// Scales the gradients so their global norm is at most `max_norm` (0: no
/// clipping), given the global norm computed by the caller.
void clip_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params, double norm, double max_norm);

}  // namespace fleet::model
