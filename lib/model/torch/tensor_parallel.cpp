#include "model/torch/tensor_parallel.h"

#include <torch/torch.h>

#include "common/error.h"
#include "model/torch/training_parts.h"

namespace fleet::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels through autograd as an integer (the context stores IValues).
TensorParallelGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["group"].toInt());
}

torch::Tensor summed(const torch::Tensor& x, TensorParallelGroup& group) {
  auto y = x.contiguous().clone();
  group.all_reduce_sum(y);
  return y;
}

struct CopyToParallel : torch::autograd::Function<CopyToParallel> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {summed(grad[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromParallel : torch::autograd::Function<ReduceFromParallel> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, std::int64_t group) {
    return summed(x, *reinterpret_cast<TensorParallelGroup*>(group));
  }
  static variable_list backward(AutogradContext*, variable_list grad) { return {grad[0], torch::Tensor()}; }
};

std::int64_t handle(TensorParallelGroup& group) { return reinterpret_cast<std::int64_t>(&group); }

}  // namespace

torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& group) {
  return CopyToParallel::apply(x, handle(group));
}

torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& group) {
  return ReduceFromParallel::apply(x, handle(group));
}

void check_tensor_parallel(const LlamaConfig& c, int size) {
  auto divides = [&](const char* field, std::int64_t value) {
    if (value % size != 0)
      throw InputError("tensor parallelism " + std::to_string(size) + " needs " + field + " (" + std::to_string(value) +
                       ") to be a multiple of it");
  };
  divides("num_attention_heads", c.num_attention_heads);
  divides("num_key_value_heads", c.num_key_value_heads);
  divides("intermediate_size", c.intermediate_size);
  divides("vocab_size", c.vocab_size);
}

ShardSpec shard_spec(const LlamaConfig& c, const std::string& full_name, int rank, int size) {
  std::string name = full_name;
  for (const char* prefix : {"exp_avg_sq.", "exp_avg."})
    if (name.rfind(prefix, 0) == 0) name = name.substr(std::string(prefix).size());
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  auto split = [&](int dim, std::int64_t full) { return ShardSpec{dim, full / size * rank, full / size, full}; };
  if (size == 1) return {};
  if (ends_with("q_proj.weight")) return split(0, c.num_attention_heads * c.head_dim);
  if (ends_with("k_proj.weight") || ends_with("v_proj.weight")) return split(0, c.num_key_value_heads * c.head_dim);
  if (ends_with("o_proj.weight")) return split(1, c.num_attention_heads * c.head_dim);
  if (ends_with("gate_proj.weight") || ends_with("up_proj.weight")) return split(0, c.intermediate_size);
  if (ends_with("down_proj.weight")) return split(1, c.intermediate_size);
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return split(0, c.vocab_size);
  return {};
}

torch::Tensor vocab_parallel_batch_loss(const torch::Tensor& local_logits, const Batch& batch, double divisor,
                                        std::int64_t vocab_start, TensorParallelGroup& group) {
  const auto V = local_logits.size(-1);
  auto logits = local_logits.narrow(1, 0, local_logits.size(1) - 1).reshape({-1, V});
  auto targets = batch.tokens.narrow(1, 1, batch.tokens.size(1) - 1).reshape({-1}).to(logits.device());
  // The softmax's shift: the global maximum, a constant for autograd.
  auto shift = std::get<0>(logits.detach().max(-1)).contiguous();
  group.all_reduce_max(shift);
  auto shifted = logits - shift.unsqueeze(-1);
  auto sum_exp = reduce_from_tensor_parallel(shifted.exp().sum(-1), group);
  // The target's logit lives on one rank; the others add zero.
  auto local_target = targets - vocab_start;
  auto mine = (local_target >= 0) & (local_target < V);
  auto picked = shifted.gather(1, local_target.clamp(0, V - 1).unsqueeze(1)).squeeze(1) * mine.to(shifted.dtype());
  auto target_logit = reduce_from_tensor_parallel(picked, group);
  auto losses = sum_exp.log() - target_logit;
  auto weights = batch.mask.narrow(1, 1, batch.mask.size(1) - 1).reshape({-1}).to(losses.options());
  return (losses * weights).sum() / std::max(divisor, 1.0);
}

}  // namespace fleet::model
