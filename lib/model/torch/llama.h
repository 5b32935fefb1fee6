// A Llama-family causal language model on libtorch (LlamaForCausalLM):
// full-sequence forward for training, and cached prefill/decode for
// inference where the sequences of one batch have different lengths and
// positions. Include only from torch targets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "model/llama_config.h"

namespace fleet::model {

class TensorParallelGroup;

/// The weights of one decoder layer, in the layout of Hugging Face's Linear
/// modules ([out_features, in_features]).
struct LlamaLayerWeights {
  torch::Tensor q_proj, k_proj, v_proj, o_proj;
  torch::Tensor gate_proj, up_proj, down_proj;
  torch::Tensor input_layernorm, post_attention_layernorm;
};

/// Keys and values of up to `slots` independent sequences, each up to
/// `max_length` tokens. A slot holds one sequence from its first token on;
/// reset() frees it for the next.
class KvCache {
 public:
  KvCache(const LlamaConfig& config, std::int64_t slots, std::int64_t max_length, torch::ScalarType dtype,
          torch::Device device = torch::kCPU);

  std::int64_t slots() const { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t max_length() const { return max_length_; }
  /// Tokens stored for `slot`.
  std::int64_t length(std::int64_t slot) const { return lengths_.at(static_cast<std::size_t>(slot)); }
  /// Forgets the sequence in `slot`.
  void reset(std::int64_t slot) { lengths_.at(static_cast<std::size_t>(slot)) = 0; }
  /// Bytes the cache tensors occupy.
  std::int64_t bytes() const;

 private:
  friend class LlamaModel;
  std::vector<torch::Tensor> keys_, values_;  ///< per layer [slots, kv_heads, max_length, head_dim]
  std::vector<std::int64_t> lengths_;
  std::int64_t max_length_;
};

/// A linear layer of a decoder layer.
enum class Projection { kQ, kK, kV, kO, kGate, kUp, kDown };
/// A norm: a decoder layer's input or post-attention norm, or the final norm
/// (layer index ignored).
enum class NormSlot { kInput, kPostAttention, kFinal };

/// Row-wise changes to the weights for one cached forward pass: how one
/// batch serves several fine-tunes of the same base model at once (DeltaZip).
/// Dim 0 of every tensor handed to a hook is the batch row; the overlay knows
/// which variant each row belongs to and adds that variant's term in place.
class WeightOverlay {
 public:
  virtual ~WeightOverlay() = default;
  /// `out` = x · W_baseᵀ ([B, ..., out_features]); adds x_rows · Δᵀ per variant.
  virtual void add_linear(std::size_t layer, Projection which, const torch::Tensor& x, torch::Tensor& out) const = 0;
  /// x · (W_base + Δ)ᵀ for every row at once, when the overlay computes that
  /// more cheaply than the base product plus add_linear (all rows of variants
  /// with many rows each, as in a prompt's prefill); an undefined tensor
  /// otherwise, and the model takes the usual path.
  virtual torch::Tensor linear(std::size_t /*layer*/, Projection /*which*/, const torch::Tensor& /*x*/,
                               const torch::Tensor& /*base*/) const {
    return {};
  }
  /// The same overlay for a step whose padding the model leaves out of its
  /// projections: `linear` and `add_linear` of the result see x as [Σ counts,
  /// in], the real positions of batch row 0, then of row 1, and so on
  /// (counts[b] of row b). Null when the overlay cannot do that; the model
  /// then projects the padded rows as well.
  virtual std::unique_ptr<const WeightOverlay> for_positions(const std::vector<std::int64_t>& /*counts*/) const {
    return nullptr;
  }
  /// The norm weight per row, [B, 1, hidden], or `base` when no row changes it.
  virtual torch::Tensor norm_weight(std::size_t layer, NormSlot which, const torch::Tensor& base) const = 0;
  /// `hidden` = embedding of `tokens` [B, T]; adds the rows' embedding deltas.
  virtual void add_embedding(const torch::Tensor& tokens, torch::Tensor& hidden) const = 0;
  /// `logits` = hidden · lm_headᵀ ([B, ..., vocab]); adds the rows' head deltas.
  virtual void add_head(const torch::Tensor& hidden, torch::Tensor& logits) const = 0;
};

class ModelFolder;

class LlamaModel {
 public:
  /// Loads config.json and the safetensors weights (one file or sharded) of a
  /// Hugging Face folder, converted to `dtype` on `device`. InputError naming
  /// the tensor for a missing tensor or a wrong shape; unexpected tensors are
  /// reported in the log and ignored.
  static LlamaModel load(const std::filesystem::path& dir, torch::ScalarType dtype = torch::kFloat32,
                         torch::Device device = torch::kCPU);
  /// Loads only the weights the planner's layers [first, last) use (a
  /// pipeline stage's; see forward_layers): every tensor is checked, the
  /// others are neither read nor kept, as after keep_only_layers.
  static LlamaModel load_layers(const std::filesystem::path& dir, int first, int last,
                                torch::ScalarType dtype = torch::kFloat32, torch::Device device = torch::kCPU);
  /// The same from a folder already opened (its config and weight index read once).
  static LlamaModel load(const ModelFolder& folder, torch::ScalarType dtype = torch::kFloat32,
                         torch::Device device = torch::kCPU);
  static LlamaModel load_layers(const ModelFolder& folder, int first, int last,
                                torch::ScalarType dtype = torch::kFloat32, torch::Device device = torch::kCPU);
  /// A freshly initialised model: normal(0, initializer_range) weights, unit
  /// norms, from a seeded generator (same seed, same weights).
  static LlamaModel random(const LlamaConfig& config, std::uint64_t seed, torch::ScalarType dtype = torch::kFloat32);
  /// A model of the config's shapes with uninitialised weights on `device`,
  /// for callers that fill every parameter (load_parameters).
  static LlamaModel uninitialized(const LlamaConfig& config, torch::ScalarType dtype = torch::kFloat32,
                                  torch::Device device = torch::kCPU);

  /// Writes config.json and model.safetensors (sharded above 4 GiB) into
  /// `dir` (which must exist), weights converted to `dtype` (default: the
  /// config's torch_dtype). Each file is written atomically.
  void save(const std::filesystem::path& dir, std::optional<torch::ScalarType> dtype = std::nullopt) const;

  const LlamaConfig& config() const { return config_; }
  torch::ScalarType dtype() const { return dtype_; }
  torch::Device device() const { return embed_tokens_.device(); }

  /// Logits [B, T, vocab] (float32) of every position of `tokens` [B, T]
  /// (int64), each row one sequence from position 0. Differentiable.
  torch::Tensor forward(const torch::Tensor& tokens) const;

  /// Runs the planner's layers [first, last) of this model, where layer 0 is
  /// the token embedding, 1..L the decoder blocks and L+1 the head (final
  /// norm + LM head): what one pipeline stage computes. `input` is token ids
  /// [B, T] when first == 0, else hidden states [B, T, hidden]; the result is
  /// hidden states, or float32 logits when the range ends with the head.
  /// forward() is forward_layers(tokens, 0, L + 2). Differentiable.
  torch::Tensor forward_layers(const torch::Tensor& input, int first, int last) const;
  /// Parameters the planner's layers [first, last) use, under their Hugging
  /// Face names (a tied head uses model.embed_tokens.weight).
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters(int first, int last) const;
  /// For training a tied model: gives the head its own copy of the embedding
  /// matrix, so the gradients of the two uses arrive separately (a trainer
  /// sums them and keeps the copies equal, as it must when the embedding and
  /// the head sit on different pipeline stages). Returns the head's matrix;
  /// an undefined tensor for an untied model.
  torch::Tensor separate_tied_head();
  /// Keeps only this rank's slice of every weight (model/tensor_parallel.h's
  /// shard_spec) and runs forward_layers with the group's collectives from
  /// now on: heads, MLP columns and the vocabulary split `group.size()` ways,
  /// the head then returning this rank's columns of the logits. The group
  /// must outlive the model. Training only (forward_cached refuses).
  void shard_for_tensor_parallel(TensorParallelGroup& group);
  /// The first vocabulary id of this rank's logits (0 without tensor parallelism).
  std::int64_t vocab_start() const;
  /// Frees the weights of every layer outside [first, last) (a pipeline stage
  /// holds only its own); the model can then run only that range.
  void keep_only_layers(int first, int last);

  /// Appends `tokens` [B, T] (int64, right-padded) to the sequences in
  /// `slots` (one per row; `counts[b]` tokens of row b are real) and returns
  /// float32 logits: [B, vocab] at each row's last real token, or [B, T,
  /// vocab] with `all_positions`. Rows may start at different cache lengths.
  /// With an `overlay`, each row runs with its own variant's weights.
  torch::Tensor forward_cached(KvCache& cache, const std::vector<std::int64_t>& slots, const torch::Tensor& tokens,
                               const std::vector<std::int64_t>& counts, bool all_positions = false,
                               const WeightOverlay* overlay = nullptr) const;

  /// Hidden states after the token embedding, [B, T, hidden].
  torch::Tensor embed(const torch::Tensor& tokens) const;

  /// What each linear layer of decoder layer `i` sees for `hidden` [B, T,
  /// hidden] (sequences from position 0), and the layer's output. For
  /// calibrating compression layer by layer.
  struct LayerInputs {
    torch::Tensor attention_in;   ///< input of q/k/v_proj
    torch::Tensor projection_in;  ///< input of o_proj
    torch::Tensor mlp_in;         ///< input of gate/up_proj
    torch::Tensor down_in;        ///< input of down_proj
    torch::Tensor output;         ///< the layer's output hidden states
  };
  LayerInputs layer_inputs(std::size_t i, const torch::Tensor& hidden) const;
  /// What the LM head sees for `hidden`, the last decoder layer's output:
  /// its final norm. For calibrating the head's compression.
  torch::Tensor head_input(const torch::Tensor& hidden) const;

  /// The weights of decoder layer `i` (modifiable: compression writes them).
  LlamaLayerWeights& layer(std::size_t i) { return layers_.at(i); }
  std::size_t num_layers() const { return layers_.size(); }

  /// Parameters under their Hugging Face names (lm_head.weight absent when tied).
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;
  /// Turns gradient tracking of every parameter on or off.
  void set_requires_grad(bool on);
  /// Replaces every parameter's data with the tensor of the same name (shapes must match).
  void load_parameters(const std::vector<std::pair<std::string, torch::Tensor>>& values);

 private:
  struct CacheStep;
  LlamaModel(LlamaConfig config, torch::ScalarType dtype);
  template <typename Make>
  void allocate(Make&& make);
  torch::Tensor run_layers(torch::Tensor hidden, const torch::Tensor& positions, CacheStep* cache_step) const;
  // Decoder blocks [first, last) without the final norm.
  torch::Tensor run_blocks(torch::Tensor hidden, const torch::Tensor& positions, std::size_t first, std::size_t last,
                           CacheStep* cache_step) const;
  // Attention output before o_proj, [B, T, heads * head_dim].
  torch::Tensor attention(std::size_t layer, const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          const torch::Tensor& positions, CacheStep* cache_step) const;
  std::pair<torch::Tensor, torch::Tensor> rotary(const torch::Tensor& positions) const;
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight) const;
  // torch::linear, plus the overlay's term when the step has one; a padded
  // step's projections compute its real positions only (the padding's
  // outputs are zero).
  torch::Tensor project(std::size_t layer, Projection which, const torch::Tensor& x, const CacheStep* step) const;
  torch::Tensor project_rows(std::size_t layer, Projection which, const torch::Tensor& x,
                             const WeightOverlay* overlay) const;
  // rms_norm with the overlay's per-row weight when the step has one.
  torch::Tensor norm(std::size_t layer, NormSlot which, const torch::Tensor& x, const CacheStep* step) const;

  LlamaConfig config_;
  torch::ScalarType dtype_;
  torch::Tensor embed_tokens_, norm_, lm_head_;  ///< lm_head_ aliases embed_tokens_ when tied
  std::vector<LlamaLayerWeights> layers_;
  torch::Tensor inv_freq_;             ///< rotary frequencies, float32
  TensorParallelGroup* tp_ = nullptr;  ///< set once the weights are sharded
};

/// Cross-entropy of predicting tokens[:, t+1] from logits[:, t] at every
/// position, flattened to [n * (T - 1)] (the tokens moved to the logits' device).
torch::Tensor next_token_losses(const torch::Tensor& logits, const torch::Tensor& tokens);

/// Mean cross-entropy of predicting tokens[:, t+1] from logits[:, t], over
/// the targets where `mask` (same shape as tokens, optional) is non-zero.
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& tokens,
                             const std::optional<torch::Tensor>& mask = std::nullopt);

/// x · wᵀ, as torch::linear(x, w). Without autograd, for float32 on a CPU with
/// AVX2 and at most small_batch::max_rows() rows in x, the small-batch kernel
/// (model/small_batch_linear.h: w is read in place, not packed); otherwise
/// torch::linear. Every projection of the model goes through it (training
/// keeps torch::linear: autograd is on there).
torch::Tensor inference_linear(const torch::Tensor& x, const torch::Tensor& w);
/// Turns the small-batch kernel off (true: on, the default), so that
/// benchmarks and tests can compare against the BLAS GEMM in one process.
void use_small_batch_linear(bool on);
bool small_batch_linear_in_use();

/// The torch dtype of a config.json torch_dtype string (float32/float16/bfloat16).
torch::ScalarType parse_torch_dtype(const std::string& name);
/// The config.json string of a torch dtype.
std::string torch_dtype_name(torch::ScalarType type);

}  // namespace fleet::model
