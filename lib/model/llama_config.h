// The configuration of a Llama-family causal language model, read from and
// written to a Hugging Face config.json (LlamaForCausalLM). No libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/json.h"

namespace fleet::model {

/// Rotary position scaling, config.json's rope_scaling: how a model trained
/// on a shorter context stretches its rotary frequencies (as transformers'
/// rope_type of the same names computes them).
struct RopeScaling {
  std::string type = "default";  ///< default (none), linear or llama3
  double factor = 1.0;           ///< linear, llama3: how much longer the context is
  /// llama3 (Llama 3.1 and later): wavelengths above original / low_freq_factor
  /// are stretched by factor, those below original / high_freq_factor kept,
  /// and those between blended.
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  ///< fewer than the heads: grouped-query attention
  std::int64_t head_dim = 0;             ///< hidden_size / num_attention_heads unless given
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  std::int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";  ///< float32, float16 or bfloat16: the stored weights
  double initializer_range = 0.02;
  std::int64_t bos_token_id = 1;
  std::int64_t eos_token_id = 2;  ///< end of sequence (what training appends)
  /// Further ids that end a sequence: config.json may list several, as
  /// Llama 3 does (end of text, end of turn); the first is eos_token_id.
  std::vector<std::int64_t> more_eos_token_ids;
  std::int64_t pad_token_id = -1;  ///< -1: none

  /// eos_token_id, then more_eos_token_ids.
  std::vector<std::int64_t> eos_token_ids() const;
  /// Parameters of the whole model (embeddings, layers, norms, LM head unless tied).
  std::int64_t parameter_count() const;
  /// Throws InputError naming the field when the values are inconsistent
  /// or above the caps (kLlamaLimits): a config.json is checked before any
  /// size in it is used to allocate or enumerate anything.
  void validate(const std::string& source) const;
};

/// The largest values validate() accepts: several times the largest public
/// Llama-family models (Llama 3.1 405B: hidden 16384, intermediate 53248,
/// 126 layers, vocabulary 128256, 128 heads of 128), far below sizes that
/// would overflow an element count or exhaust memory while being checked.
struct LlamaLimits {
  static constexpr std::int64_t kVocabulary = std::int64_t{1} << 24;
  static constexpr std::int64_t kHidden = std::int64_t{1} << 20;
  static constexpr std::int64_t kIntermediate = std::int64_t{1} << 22;
  static constexpr std::int64_t kLayers = 4096;
  static constexpr std::int64_t kHeads = 4096;
  static constexpr std::int64_t kHeadDim = 4096;
  static constexpr std::int64_t kPositions = std::int64_t{1} << 24;
};

/// One weight of the model: its Hugging Face name, shape, and the config
/// fields its shape comes from (named in errors when a file disagrees).
struct ParameterShape {
  std::string name;
  std::vector<std::int64_t> shape;
  const char* fields = "";
};

/// Every weight of the model `config` describes, in the order of the
/// checkpoint (embedding, layers, final norm, LM head unless tied). The
/// config must have passed validate(): the list has 9 entries per layer.
std::vector<ParameterShape> parameter_shapes(const LlamaConfig& config);

/// Reads a config.json (a file, or a model folder holding one). InputError for
/// another architecture, a missing field, or a value this implementation does
/// not support (rope_scaling other than linear and llama3, attention/MLP
/// biases, activations other than SiLU).
LlamaConfig load_llama_config(const std::filesystem::path& path);
/// The ids that end generation for the model in `model_dir`: config.json's
/// end-of-sequence ids, then those of generation_config.json when the folder
/// has one (as transformers' generate and vLLM stop on either). InputError
/// naming generation_config.json when it is malformed or lists an id outside
/// the vocabulary.
std::vector<std::int64_t> end_of_sequence_ids(const std::filesystem::path& model_dir, const LlamaConfig& config);
/// The weights of a model folder: model.safetensors.index.json when sharded,
/// else model.safetensors; InputError when neither exists.
std::filesystem::path model_weights_path(const std::filesystem::path& dir);
/// Parses config.json text; `source` names it in errors.
LlamaConfig parse_llama_config(const JsonValue& root);
/// The config.json text `transformers` reads back as the same model.
std::string llama_config_json(const LlamaConfig& config);

/// Built-in configurations for self-made models: "tiny" (about 0.8 M
/// parameters, byte vocabulary, trains in minutes on two cores), "small"
/// (about 10 M) and "100m" (about 101 M parameters), all with the byte vocabulary.
LlamaConfig llama_preset(const std::string& name);
/// Names of the built-in presets.
std::vector<std::string> llama_preset_names();

}  // namespace fleet::model
