#include "model/llama_config.h"

#include <algorithm>

#include "common/error.h"
#include "common/file_io.h"
#include "text/tokenizer.h"

namespace fleet::model {

std::int64_t LlamaConfig::parameter_count() const {
  const std::int64_t h = hidden_size, kv = num_key_value_heads * head_dim, q = num_attention_heads * head_dim;
  const std::int64_t attention = h * q + 2 * h * kv + q * h;
  const std::int64_t mlp = 3 * h * intermediate_size;
  const std::int64_t layer = attention + mlp + 2 * h;
  return vocab_size * h * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * layer + h;
}

std::vector<ParameterShape> parameter_shapes(const LlamaConfig& c) {
  const std::int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const char* query = "num_attention_heads, head_dim and hidden_size";
  const char* key_value = "num_key_value_heads, head_dim and hidden_size";
  const char* mlp = "intermediate_size and hidden_size";
  std::vector<ParameterShape> out;
  out.reserve(static_cast<std::size_t>(9 * c.num_hidden_layers + 3));
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, "vocab_size and hidden_size"});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    out.push_back({prefix + "self_attn.q_proj.weight", {q, h}, query});
    out.push_back({prefix + "self_attn.k_proj.weight", {kv, h}, key_value});
    out.push_back({prefix + "self_attn.v_proj.weight", {kv, h}, key_value});
    out.push_back({prefix + "self_attn.o_proj.weight", {h, q}, query});
    out.push_back({prefix + "mlp.gate_proj.weight", {c.intermediate_size, h}, mlp});
    out.push_back({prefix + "mlp.up_proj.weight", {c.intermediate_size, h}, mlp});
    out.push_back({prefix + "mlp.down_proj.weight", {h, c.intermediate_size}, mlp});
    out.push_back({prefix + "input_layernorm.weight", {h}, "hidden_size"});
    out.push_back({prefix + "post_attention_layernorm.weight", {h}, "hidden_size"});
  }
  out.push_back({"model.norm.weight", {h}, "hidden_size"});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}, "vocab_size and hidden_size"});
  return out;
}

std::vector<std::int64_t> LlamaConfig::eos_token_ids() const {
  std::vector<std::int64_t> ids{eos_token_id};
  ids.insert(ids.end(), more_eos_token_ids.begin(), more_eos_token_ids.end());
  return ids;
}

void LlamaConfig::validate(const std::string& source) const {
  auto fail = [&](const std::string& field, const std::string& why) {
    throw InputError(why, ErrorContext{source, field, std::nullopt});
  };
  auto positive = [&](const char* field, std::int64_t v) {
    if (v <= 0) fail(field, "must be positive, got " + std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  auto at_most = [&](const char* field, std::int64_t v, std::int64_t cap) {
    if (v > cap)
      fail(field, std::to_string(v) + " is above " + std::to_string(cap) + ", the largest this build accepts");
  };
  at_most("vocab_size", vocab_size, LlamaLimits::kVocabulary);
  at_most("hidden_size", hidden_size, LlamaLimits::kHidden);
  at_most("intermediate_size", intermediate_size, LlamaLimits::kIntermediate);
  at_most("num_hidden_layers", num_hidden_layers, LlamaLimits::kLayers);
  at_most("num_attention_heads", num_attention_heads, LlamaLimits::kHeads);
  at_most("num_key_value_heads", num_key_value_heads, LlamaLimits::kHeads);
  at_most("head_dim", head_dim, LlamaLimits::kHeadDim);
  at_most("max_position_embeddings", max_position_embeddings, LlamaLimits::kPositions);
  if (num_attention_heads % num_key_value_heads != 0)
    fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(num_attention_heads) + ")");
  if (head_dim % 2 != 0) fail("head_dim", "must be even for rotary embeddings");
  if (!(rms_norm_eps > 0)) fail("rms_norm_eps", "must be positive");
  if (!(rope_theta > 0)) fail("rope_theta", "must be positive");
  if (torch_dtype != "float32" && torch_dtype != "float16" && torch_dtype != "bfloat16")
    fail("torch_dtype", "must be float32, float16 or bfloat16, got '" + torch_dtype + "'");
  if (bos_token_id >= vocab_size) fail("bos_token_id", "token ids must be below vocab_size");
  for (auto id : eos_token_ids())
    if (id < 0 || id >= vocab_size)
      fail("eos_token_id", "token ids must be 0 to vocab_size - 1, got " + std::to_string(id));
}

namespace {

RopeScaling parse_rope_scaling(const JsonValue& v) {
  RopeScaling r;
  // transformers reads rope_type, and type in configs written before it.
  auto type = v.find("rope_type");
  if (!type) type = v.find("type");
  if (!type) v.fail("rope_scaling needs rope_type (default, linear or llama3)");
  r.type = type->as<std::string>();
  if (r.type == "default") return r;
  if (r.type != "linear" && r.type != "llama3")
    type->fail("rope_scaling type '" + r.type + "' is not supported (default, linear or llama3)");
  r.factor = v.get<double>("factor");
  if (!(r.factor >= 1.0)) v.at("factor").fail("must be at least 1");
  if (r.type == "llama3") {
    r.low_freq_factor = v.get<double>("low_freq_factor");
    r.high_freq_factor = v.get<double>("high_freq_factor");
    r.original_max_position_embeddings = v.get<std::int64_t>("original_max_position_embeddings");
    if (!(r.low_freq_factor > 0)) v.at("low_freq_factor").fail("must be positive");
    if (!(r.high_freq_factor > r.low_freq_factor)) v.at("high_freq_factor").fail("must exceed low_freq_factor");
    if (r.original_max_position_embeddings <= 0) v.at("original_max_position_embeddings").fail("must be positive");
  }
  return r;
}

// One id or a non-empty list of them.
std::vector<std::int64_t> token_ids(const JsonValue& v) {
  if (!v.is_array()) return {v.as<std::int64_t>()};
  auto ids = v.as<std::vector<std::int64_t>>();
  if (ids.empty()) v.fail("must list at least one token id");
  return ids;
}

}  // namespace

LlamaConfig parse_llama_config(const JsonValue& root) {
  if (auto arch = root.find("architectures")) {
    auto names = arch->as<std::vector<std::string>>();
    if (names.size() != 1 || names[0] != "LlamaForCausalLM")
      arch->fail("unsupported architecture (only LlamaForCausalLM is supported)");
  }
  if (auto type = root.find("model_type"); type && type->as<std::string>() != "llama")
    type->fail("unsupported model_type '" + type->as<std::string>() + "' (only llama is supported)");
  if (auto act = root.find("hidden_act"); act && act->as<std::string>() != "silu")
    act->fail("unsupported activation '" + act->as<std::string>() + "' (only silu is supported)");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (auto b = root.find(bias); b && b->as<bool>()) b->fail("biases are not supported");
  if (auto tp = root.find("pretraining_tp"); tp && tp->as<int>() != 1) tp->fail("pretraining_tp must be 1");

  LlamaConfig c;
  c.vocab_size = root.get<std::int64_t>("vocab_size");
  c.hidden_size = root.get<std::int64_t>("hidden_size");
  c.intermediate_size = root.get<std::int64_t>("intermediate_size");
  c.num_hidden_layers = root.get<std::int64_t>("num_hidden_layers");
  c.num_attention_heads = root.get<std::int64_t>("num_attention_heads");
  c.num_key_value_heads = root.get_or<std::int64_t>("num_key_value_heads", c.num_attention_heads);
  c.head_dim =
      root.get_or<std::int64_t>("head_dim", c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  if (!root.has("head_dim") && c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads != 0)
    root.at("num_attention_heads").fail("must divide hidden_size");
  c.rms_norm_eps = root.get_or<double>("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = root.get_or<double>("rope_theta", c.rope_theta);
  c.max_position_embeddings = root.get_or<std::int64_t>("max_position_embeddings", c.max_position_embeddings);
  if (auto scaling = root.find("rope_scaling")) c.rope_scaling = parse_rope_scaling(*scaling);
  c.tie_word_embeddings = root.get_or<bool>("tie_word_embeddings", false);
  c.torch_dtype = root.get_or<std::string>("torch_dtype", c.torch_dtype);
  c.initializer_range = root.get_or<double>("initializer_range", c.initializer_range);
  // Some configs list several end-of-sequence ids (Llama 3: end of text, end
  // of turn); any of them ends generation, the first is what training appends.
  if (auto eos = root.find("eos_token_id")) {
    auto ids = token_ids(*eos);
    c.eos_token_id = ids.front();
    c.more_eos_token_ids.assign(ids.begin() + 1, ids.end());
  }
  c.bos_token_id = root.get_or<std::int64_t>("bos_token_id", c.bos_token_id);
  c.pad_token_id = root.get_or<std::int64_t>("pad_token_id", -1);
  c.validate(root.file());
  return c;
}

LlamaConfig load_llama_config(const std::filesystem::path& path) {
  auto file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  if (!std::filesystem::is_regular_file(file))
    throw InputError(file.string() + ": no such file (expected a model folder with config.json)");
  auto doc = load_json_file(file);
  return parse_llama_config(doc.root());
}

std::filesystem::path model_weights_path(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "model.safetensors.index.json")) return dir / "model.safetensors.index.json";
  if (std::filesystem::exists(dir / "model.safetensors")) return dir / "model.safetensors";
  throw InputError(dir.string() + ": no model.safetensors or model.safetensors.index.json");
}

namespace {

nlohmann::ordered_json rope_scaling_json(const RopeScaling& r) {
  if (r.type == "default") return nullptr;
  nlohmann::ordered_json j = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  return j;
}

}  // namespace

std::vector<std::int64_t> end_of_sequence_ids(const std::filesystem::path& model_dir, const LlamaConfig& config) {
  auto ids = config.eos_token_ids();
  const auto path = model_dir / "generation_config.json";
  if (!std::filesystem::is_regular_file(path)) return ids;
  auto doc = load_json_file(path);
  if (auto eos = doc.root().find("eos_token_id")) {
    for (auto id : token_ids(*eos)) {
      if (id < 0 || id >= config.vocab_size)
        eos->fail("token id " + std::to_string(id) + " is outside the vocabulary (" +
                  std::to_string(config.vocab_size) + ")");
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  return ids;
}

std::string llama_config_json(const LlamaConfig& c) {
  nlohmann::ordered_json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", rope_scaling_json(c.rope_scaling)},
      {"max_position_embeddings", c.max_position_embeddings},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"mlp_bias", false},
      {"pretraining_tp", 1},
      {"initializer_range", c.initializer_range},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.more_eos_token_ids.empty() ? nlohmann::ordered_json(c.eos_token_id)
                                                    : nlohmann::ordered_json(c.eos_token_ids())},
      {"torch_dtype", c.torch_dtype},
      {"use_cache", true},
  };
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  return j.dump(2) + "\n";
}

LlamaConfig llama_preset(const std::string& name) {
  LlamaConfig c;
  c.vocab_size = text::kByteVocabSize;
  c.bos_token_id = text::kByteBosId;
  c.eos_token_id = text::kByteEosId;
  c.pad_token_id = text::kBytePadId;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 512;
  if (name == "tiny") {
    c.hidden_size = 128;
    c.intermediate_size = 384;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.tie_word_embeddings = true;
  } else if (name == "small") {
    c.hidden_size = 384;
    c.intermediate_size = 1024;
    c.num_hidden_layers = 6;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 1024;
  } else if (name == "100m") {
    c.hidden_size = 768;
    c.intermediate_size = 2048;
    c.num_hidden_layers = 16;
    c.num_attention_heads = 12;
    c.num_key_value_heads = 4;
    c.max_position_embeddings = 2048;
  } else {
    throw UsageError("unknown model preset '" + name + "' (known: tiny, small, 100m)");
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

std::vector<std::string> llama_preset_names() { return {"tiny", "small", "100m"}; }

}  // namespace fleet::model
