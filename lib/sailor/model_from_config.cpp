#include "sailor/model_from_config.h"

#include <cstdint>

#include "common/error.h"

namespace fleet::sailor {
namespace {

// Sizes of one family member, in the terms the layer formulas need.
struct Shape {
  double vocab = 0, hidden = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, positions = 0;
  double embed_dim = 0;  ///< OPT's word_embed_proj_dim (equals hidden elsewhere)
  int layers = 0;
  bool biases = false;      ///< linear layers carry biases (OPT, GPT-NeoX)
  bool qkv_bias = false;    ///< q/k/v projections carry biases
  bool gated_mlp = false;   ///< SwiGLU: gate, up, down (Llama)
  bool layer_norm = false;  ///< LayerNorm (weight + bias) instead of RMSNorm (weight)
  bool tied = false;
  bool final_norm = true;
};

Shape read_shape(const JsonValue& c) {
  const auto type = c.get<std::string>("model_type");
  Shape s;
  if (type == "llama" || type == "mistral") {
    s.hidden = c.get<double>("hidden_size");
    s.ffn = c.get<double>("intermediate_size");
    s.layers = c.get<int>("num_hidden_layers");
    s.heads = c.get<double>("num_attention_heads");
    s.kv_heads = c.get_or<double>("num_key_value_heads", s.heads);
    s.head_dim = c.get_or<double>("head_dim", s.hidden / s.heads);
    s.vocab = c.get<double>("vocab_size");
    s.tied = c.get_or<bool>("tie_word_embeddings", false);
    s.gated_mlp = true;
    s.biases = c.get_or<bool>("attention_bias", false);
    s.qkv_bias = s.biases;
  } else if (type == "opt") {
    s.hidden = c.get<double>("hidden_size");
    s.ffn = c.get<double>("ffn_dim");
    s.layers = c.get<int>("num_hidden_layers");
    s.heads = s.kv_heads = c.get<double>("num_attention_heads");
    s.head_dim = s.hidden / s.heads;
    s.vocab = c.get<double>("vocab_size");
    s.positions = c.get<double>("max_position_embeddings") + 2;  // OPT offsets positions by 2
    s.embed_dim = c.get_or<double>("word_embed_proj_dim", s.hidden);
    s.biases = s.qkv_bias = c.get_or<bool>("enable_bias", true);
    s.layer_norm = true;
    s.tied = c.get_or<bool>("tie_word_embeddings", true);
    s.final_norm = c.get_or<bool>("do_layer_norm_before", true);
  } else if (type == "gpt_neox") {
    s.hidden = c.get<double>("hidden_size");
    s.ffn = c.get<double>("intermediate_size");
    s.layers = c.get<int>("num_hidden_layers");
    s.heads = s.kv_heads = c.get<double>("num_attention_heads");
    s.head_dim = s.hidden / s.heads;
    s.vocab = c.get<double>("vocab_size");
    s.biases = s.qkv_bias = c.get_or<bool>("attention_bias", true);
    s.layer_norm = true;
    s.tied = c.get_or<bool>("tie_word_embeddings", false);
  } else if (type == "gpt_neo") {
    s.hidden = c.get<double>("hidden_size");
    s.layers = c.get<int>("num_layers");
    s.heads = s.kv_heads = c.get<double>("num_heads");
    s.head_dim = s.hidden / s.heads;
    auto inner = c.find("intermediate_size");
    s.ffn = inner ? inner->as<double>() : 4 * s.hidden;
    s.vocab = c.get<double>("vocab_size");
    s.positions = c.get<double>("max_position_embeddings");
    s.biases = true;  // out_proj, c_fc and c_proj carry biases; q/k/v do not
    s.layer_norm = true;
    s.tied = true;
  } else {
    c.at("model_type")
        .fail("unsupported model_type '" + type + "' (supported: llama, mistral, opt, gpt_neox, gpt_neo)");
  }
  if (s.embed_dim == 0) s.embed_dim = s.hidden;
  if (s.hidden <= 0 || s.ffn <= 0 || s.layers <= 0 || s.heads <= 0 || s.vocab <= 0)
    c.fail("hidden, intermediate, layer, head and vocabulary sizes must be positive");
  return s;
}

// Parameters of one transformer block on one rank of a t-way tensor-parallel
// split (Megatron style: column-parallel q/k/v and up projections, row-parallel
// output and down projections; norms and row-parallel biases replicated).
double block_params(const Shape& s, int t) {
  const double h = s.hidden, q = s.heads * s.head_dim;
  // Key/value heads split across ranks, or replicated when fewer than the ranks.
  const double kv_per_rank = s.kv_heads >= t ? s.kv_heads / t : 1;
  const double kv = kv_per_rank * s.head_dim;
  double column = h * q / t + 2 * h * kv + (s.gated_mlp ? 2 : 1) * h * s.ffn / t;
  double row = q / t * h + s.ffn / t * h;
  double split_biases = 0, replicated = 0;
  if (s.qkv_bias) split_biases += q / t + 2 * kv;
  if (s.biases) {
    split_biases += s.ffn / t * (s.gated_mlp ? 2 : 1);
    replicated += 2 * h;  // output and down projection biases
  }
  replicated += (s.layer_norm ? 4 : 2) * h;
  return column + row + split_biases + replicated;
}

}  // namespace

ModelSpec model_spec_from_hf_config(const JsonValue& config, int sequence_length, double activation_bytes_per_float,
                                    const std::string& name) {
  if (sequence_length <= 0) throw UsageError("the sequence length must be positive");
  const Shape s = read_shape(config);
  const double seq = sequence_length, h = s.hidden, norm = s.layer_norm ? 2 * h : h;
  std::vector<int> degrees;
  for (int t : {1, 2, 4, 8})
    if (static_cast<std::int64_t>(s.heads) % t == 0) degrees.push_back(t);

  ModelSpec model;
  model.name = name;
  LayerSpec embedding, head;
  for (int t : degrees) {
    const double projection = s.embed_dim != h ? s.embed_dim * h : 0;
    // Vocabulary-parallel embedding; positions and projections replicated.
    embedding.params[t] = s.vocab * s.embed_dim / t + s.positions * h + projection;
    embedding.act_output[t] = seq * h;
    embedding.act_memory[t] = seq * h;
    // The LM head holds its own copy of the (possibly tied) embedding matrix on
    // the last stage; logits in float32 and their gradient dominate its activations.
    head.params[t] = s.vocab * s.embed_dim / t + (s.final_norm ? norm : 0) + projection;
    head.act_output[t] = seq * h;
    head.act_memory[t] = seq * (2 * s.vocab / t + h);
  }
  model.layers.push_back(embedding);
  for (int layer = 0; layer < s.layers; ++layer) {
    LayerSpec block;
    for (int t : degrees) {
      block.params[t] = block_params(s, t);
      block.act_output[t] = seq * h;
      const double bytes = seq * h * (10 + 24.0 / t + 5 * s.heads * seq / (h * t));
      block.act_memory[t] = bytes / activation_bytes_per_float;
    }
    model.layers.push_back(block);
  }
  model.layers.push_back(head);
  return model;
}

}  // namespace fleet::sailor
