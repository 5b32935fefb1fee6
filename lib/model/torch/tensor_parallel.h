// Megatron-style tensor parallelism for LlamaModel's training forward: the
// collectives of a TP group (implemented by the distributed runtime), the
// two autograd functions that place them (identity forward / sum backward
// before a column-parallel layer, sum forward / identity backward after a
// row-parallel one), which slice of each weight a rank holds, and the
// vocabulary-parallel cross-entropy. Include only from libtorch targets.
#pragma once

#include <cstdint>
#include <string>

#include <torch/types.h>

#include "model/llama_config.h"

namespace fleet::model {

struct Batch;

/// The ranks that split one model replica's layers.
class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In place over the group; `t` is contiguous.
  virtual void all_reduce_sum(torch::Tensor& t) = 0;
  virtual void all_reduce_max(torch::Tensor& t) = 0;
};

/// Identity forward; the gradient is summed over the group (the input of a
/// column-parallel layer, used by every rank).
torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& group);
/// Sum over the group forward; identity backward (the partial outputs of a
/// row-parallel layer).
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& group);

/// Which slice of a full parameter a rank holds: along `dim`, rows
/// [offset, offset + length) of `full`. dim -1: the whole tensor (replicated).
struct ShardSpec {
  int dim = -1;
  std::int64_t offset = 0, length = 0, full = 0;
};
/// The slice of Hugging Face parameter `name` (an optimizer moment
/// "exp_avg.<name>" too) that rank `rank` of `size` holds: q/k/v, gate/up,
/// the embedding and the LM head by rows (output features, vocabulary),
/// o/down by columns (input features), norms whole.
ShardSpec shard_spec(const LlamaConfig& config, const std::string& name, int rank, int size);
/// InputError naming the field when the config does not split `size` ways.
void check_tensor_parallel(const LlamaConfig& config, int size);

/// batch_loss for logits split by vocabulary: `local_logits` [n, T, V/size]
/// are columns [vocab_start, vocab_start + V/size) of the full logits. Every
/// rank gets the whole loss; gradients reach each rank's own columns.
torch::Tensor vocab_parallel_batch_loss(const torch::Tensor& local_logits, const Batch& batch, double divisor,
                                        std::int64_t vocab_start, TensorParallelGroup& group);

}  // namespace fleet::model
