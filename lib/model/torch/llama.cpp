#include "model/torch/llama.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/safetensors.h"
#include "model/model_folder.h"
#include "model/small_batch_linear.h"
#include "model/torch/tensor_bridge.h"
#include "model/torch/tensor_parallel.h"

namespace fleet::model {
namespace {

constexpr std::uint64_t kMaxShardBytes = 4ull << 30;

std::string layer_name(std::size_t i, const char* what) { return "model.layers." + std::to_string(i) + "." + what; }

// Every weight of a layer with its Hugging Face suffix.
template <typename Layer, typename F>
void for_each_layer_tensor(Layer& layer, F&& f) {
  f("self_attn.q_proj.weight", layer.q_proj);
  f("self_attn.k_proj.weight", layer.k_proj);
  f("self_attn.v_proj.weight", layer.v_proj);
  f("self_attn.o_proj.weight", layer.o_proj);
  f("mlp.gate_proj.weight", layer.gate_proj);
  f("mlp.up_proj.weight", layer.up_proj);
  f("mlp.down_proj.weight", layer.down_proj);
  f("input_layernorm.weight", layer.input_layernorm);
  f("post_attention_layernorm.weight", layer.post_attention_layernorm);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  auto half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

namespace {

void check_tokens(const torch::Tensor& tokens, std::int64_t vocab) {
  if (tokens.dim() != 2) throw InputError("tokens must be a [batch, length] tensor");
  if (tokens.scalar_type() != torch::kInt64) throw InputError("tokens must be int64");
  if (tokens.numel() == 0) return;
  auto lo = tokens.min().item<std::int64_t>(), hi = tokens.max().item<std::int64_t>();
  if (lo < 0 || hi >= vocab)
    throw InputError("token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary (size " +
                     std::to_string(vocab) + ")");
}

std::atomic<bool> small_batch_on{true};

}  // namespace

void use_small_batch_linear(bool on) { small_batch_on = on; }
bool small_batch_linear_in_use() { return small_batch_on && small_batch::available(); }

torch::Tensor inference_linear(const torch::Tensor& x, const torch::Tensor& w) {
  const bool applies = !torch::GradMode::is_enabled() && small_batch_linear_in_use() && x.device().is_cpu() &&
                       w.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
                       w.scalar_type() == torch::kFloat32 && w.dim() == 2 && w.is_contiguous() && x.dim() >= 1 &&
                       x.size(-1) == w.size(1) && x.numel() > 0;
  if (!applies) return torch::linear(x, w);
  const std::int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  if (rows > small_batch::max_rows(in)) return torch::linear(x, w);
  const auto xc = x.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  auto y = torch::empty(sizes, x.options());
  const float* xp = xc.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Threads split the outputs: each output is one thread's fixed-order sum.
  at::parallel_for(0, out, 192, [&](std::int64_t begin, std::int64_t end) {
    small_batch::linear(xp, rows, in, in, wp + begin * in, end - begin, yp + begin, out);
  });
  return y;
}

// State of one cached forward: which cache rows the batch uses and where.
struct LlamaModel::CacheStep {
  KvCache* cache;
  const std::vector<std::int64_t>* slots;
  const std::vector<std::int64_t>* counts;
  std::vector<std::int64_t> starts;         ///< cache length of each row before this step
  std::int64_t key_length;                  ///< keys attended to: max over rows of start + T
  std::optional<torch::Tensor> slot_index;  ///< set when the slots are not one contiguous run
  const WeightOverlay* overlay = nullptr;
  // A prefill pads its rows to the longest: then the flat indices (b · T + t)
  // of the real positions, and the overlay's view of those rows (null
  // without an overlay).
  std::optional<torch::Tensor> real_positions;
  std::unique_ptr<const WeightOverlay> position_overlay;
};

torch::ScalarType parse_torch_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "float16") return torch::kFloat16;
  if (name == "bfloat16") return torch::kBFloat16;
  throw UsageError("unknown dtype '" + name + "' (use float32, float16 or bfloat16)");
}

std::string torch_dtype_name(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return "float32";
    case torch::kFloat16:
      return "float16";
    case torch::kBFloat16:
      return "bfloat16";
    default:
      throw UsageError(std::string("unsupported model dtype ") + c10::toString(type));
  }
}

KvCache::KvCache(const LlamaConfig& config, std::int64_t slots, std::int64_t max_length, torch::ScalarType dtype,
                 torch::Device device)
    : lengths_(static_cast<std::size_t>(slots), 0), max_length_(max_length) {
  if (slots <= 0 || max_length <= 0) throw UsageError("a KV cache needs at least one slot and one position");
  auto options = torch::TensorOptions().dtype(dtype).device(device);
  for (std::int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(torch::zeros({slots, config.num_key_value_heads, max_length, config.head_dim}, options));
    values_.push_back(torch::zeros_like(keys_.back()));
  }
}

std::int64_t KvCache::bytes() const {
  std::int64_t total = 0;
  for (std::size_t l = 0; l < keys_.size(); ++l)
    total += static_cast<std::int64_t>(keys_[l].nbytes() + values_[l].nbytes());
  return total;
}

namespace {

// Rotary frequencies stretched for a longer context, in float32 as
// transformers computes them (modeling_rope_utils: linear, llama3).
torch::Tensor scaled_inverse_frequencies(torch::Tensor inv_freq, const RopeScaling& r) {
  if (r.type == "default") return inv_freq;
  if (r.type == "linear") return inv_freq / r.factor;
  // llama3: wavelengths longer than the original context / low_freq_factor
  // are stretched by factor, shorter than context / high_freq_factor kept,
  // and those between blended linearly in context / wavelength.
  const double context = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = context / r.low_freq_factor, high_freq_wavelen = context / r.high_freq_factor;
  auto wavelen = 2 * std::numbers::pi / inv_freq;
  auto stretched = torch::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  auto smooth = (context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  auto smoothed = (1 - smooth) * stretched / r.factor + smooth * stretched;
  auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, stretched);
}

}  // namespace

LlamaModel::LlamaModel(LlamaConfig config, torch::ScalarType dtype) : config_(std::move(config)), dtype_(dtype) {
  const auto hd = config_.head_dim;
  auto exponent = torch::arange(0, hd, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(hd);
  inv_freq_ = scaled_inverse_frequencies(1.0 / torch::pow(config_.rope_theta, exponent), config_.rope_scaling);
}

// Fills a model's parameters in the order of parameter_shapes() with make(shape).
template <typename Make>
void LlamaModel::allocate(Make&& make) {
  auto shapes = parameter_shapes(config_);
  std::size_t next = 0;
  auto take = [&] { return make(shapes[next++].shape); };
  embed_tokens_ = take();
  layers_.resize(static_cast<std::size_t>(config_.num_hidden_layers));
  for (auto& layer : layers_) for_each_layer_tensor(layer, [&](const char*, torch::Tensor& t) { t = take(); });
  norm_ = take();
  lm_head_ = config_.tie_word_embeddings ? embed_tokens_ : take();
}

LlamaModel LlamaModel::random(const LlamaConfig& config, std::uint64_t seed, torch::ScalarType dtype) {
  config.validate("config");
  LlamaModel m(config, dtype);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  // Drawn in a fixed order, so a seed always gives the same weights; norms start at 1.
  m.allocate([&](const std::vector<std::int64_t>& shape) {
    if (shape.size() == 1) return torch::ones(shape, torch::TensorOptions().dtype(dtype));
    return torch::empty(shape, torch::kFloat32).normal_(0.0, config.initializer_range, generator).to(dtype);
  });
  return m;
}

LlamaModel LlamaModel::uninitialized(const LlamaConfig& config, torch::ScalarType dtype, torch::Device device) {
  config.validate("config");
  LlamaModel m(config, dtype);
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  m.allocate([&](const std::vector<std::int64_t>& shape) { return torch::empty(shape, options); });
  m.inv_freq_ = m.inv_freq_.to(device);
  return m;
}

LlamaModel LlamaModel::load(const std::filesystem::path& dir, torch::ScalarType dtype, torch::Device device) {
  return load(ModelFolder(dir), dtype, device);
}

LlamaModel LlamaModel::load(const ModelFolder& folder, torch::ScalarType dtype, torch::Device device) {
  return load_layers(folder, 0, folder.config().num_hidden_layers + 2, dtype, device);
}

LlamaModel LlamaModel::load_layers(const std::filesystem::path& dir, int first, int last, torch::ScalarType dtype,
                                   torch::Device device) {
  return load_layers(ModelFolder(dir), first, last, dtype, device);
}

LlamaModel LlamaModel::load_layers(const ModelFolder& folder, int first, int last, torch::ScalarType dtype,
                                   torch::Device device) {
  const LlamaConfig& config = folder.config();
  const int blocks = config.num_hidden_layers;
  if (first < 0 || last > blocks + 2 || first >= last)
    throw InputError("layers [" + std::to_string(first) + ", " + std::to_string(last) + ") are not a range of this " +
                     std::to_string(blocks + 2) + "-layer model");
  const bool head = last == blocks + 2;
  // Which stored tensors the range uses: the embedding (also as a tied head),
  // its blocks, the final norm and an untied head.
  auto wanted = [&](const std::string& name) {
    if (name == "model.embed_tokens.weight") return first == 0 || (head && config.tie_word_embeddings);
    if (name == "model.norm.weight" || name == "lm_head.weight") return head;
    const std::string prefix = "model.layers.";
    const auto i = std::stoi(name.substr(prefix.size()));
    return i >= first - 1 && i < last - 1;
  };
  const auto& weights = folder.weights_path();
  const SafetensorsCheckpoint& checkpoint = folder.weights();
  // Every size config.json gives is checked against the weights before
  // anything is allocated from it.
  const auto config_file = (folder.path() / "config.json").string();
  const std::size_t needed = static_cast<std::size_t>(9 * config.num_hidden_layers + 2);
  if (checkpoint.names().size() < needed)
    throw InputError(std::to_string(config.num_hidden_layers) + " layers need at least " + std::to_string(needed) +
                         " tensors; " + weights.filename().string() + " holds " +
                         std::to_string(checkpoint.names().size()),
                     ErrorContext{config_file, "num_hidden_layers", std::nullopt});
  const auto shapes = parameter_shapes(config);
  for (const auto& [name, shape, fields] : shapes) {
    if (!checkpoint.contains(name))
      throw InputError("missing tensor '" + name + "'", ErrorContext{weights.string(), "", std::nullopt});
    const auto& info = checkpoint.info(name);
    if (info.shape != shape)
      throw InputError("tensor '" + name + "' of " + weights.filename().string() + " has shape " +
                           shape_text(info.shape) + ", but " + fields + " make it " + shape_text(shape),
                       ErrorContext{config_file, "", std::nullopt});
    if (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16)
      throw InputError(weights.string() + ": tensor '" + name + "' is " + std::string(dtype_name(info.dtype)) +
                       "; model weights must be F32, F16 or BF16");
  }
  LlamaModel m(config, dtype);
  std::map<std::string, torch::Tensor> loaded;
  for (const auto& entry : shapes)
    if (wanted(entry.name)) loaded[entry.name] = to_torch(checkpoint.view(entry.name)).to(device, dtype);
  for (const auto& name : checkpoint.names()) {
    bool known = std::any_of(shapes.begin(), shapes.end(), [&](const auto& e) { return e.name == name; }) ||
                 (name == "lm_head.weight" && config.tie_word_embeddings) ||
                 name.find("rotary_emb.inv_freq") != std::string::npos;
    if (!known) spdlog::warn("{}: ignoring unexpected tensor '{}'", weights.string(), name);
  }
  // Tensors outside the range stay undefined.
  auto take = [&](const std::string& name) {
    auto it = loaded.find(name);
    return it == loaded.end() ? torch::Tensor() : it->second;
  };
  m.embed_tokens_ = first == 0 ? take("model.embed_tokens.weight") : torch::Tensor();
  m.layers_.resize(static_cast<std::size_t>(config.num_hidden_layers));
  for (std::size_t i = 0; i < m.layers_.size(); ++i)
    for_each_layer_tensor(m.layers_[i], [&](const char* suffix, torch::Tensor& t) { t = take(layer_name(i, suffix)); });
  m.norm_ = take("model.norm.weight");
  if (head) m.lm_head_ = config.tie_word_embeddings ? take("model.embed_tokens.weight") : take("lm_head.weight");
  m.inv_freq_ = m.inv_freq_.to(device);
  return m;
}

void LlamaModel::save(const std::filesystem::path& dir, std::optional<torch::ScalarType> dtype) const {
  torch::ScalarType out_type = dtype.value_or(parse_torch_dtype(config_.torch_dtype));
  LlamaConfig config = config_;
  config.torch_dtype = torch_dtype_name(out_type);
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : named_parameters()) add_to_writer(writer, name, tensor.detach().to(out_type));
  // Weights first, config last: a folder with a config always has its weights.
  writer.write_sharded(dir, kMaxShardBytes, "model");
  write_file_atomically(dir / "config.json", llama_config_json(config));
}

std::vector<std::pair<std::string, torch::Tensor>> LlamaModel::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", embed_tokens_);
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for_each_layer_tensor(
        layers_[i], [&](const char* suffix, const torch::Tensor& t) { out.emplace_back(layer_name(i, suffix), t); });
  out.emplace_back("model.norm.weight", norm_);
  if (!config_.tie_word_embeddings) out.emplace_back("lm_head.weight", lm_head_);
  return out;
}

void LlamaModel::set_requires_grad(bool on) {
  for (auto& [name, t] : named_parameters()) t.set_requires_grad(on);
}

std::vector<std::pair<std::string, torch::Tensor>> LlamaModel::named_parameters(int first, int last) const {
  const int blocks = static_cast<int>(layers_.size());
  if (first < 0 || last > blocks + 2 || first >= last)
    throw InputError("layers [" + std::to_string(first) + ", " + std::to_string(last) + ") are not a range of this " +
                     std::to_string(blocks + 2) + "-layer model");
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (first == 0) out.emplace_back("model.embed_tokens.weight", embed_tokens_);
  for (int i = std::max(first - 1, 0); i < std::min(last - 1, blocks); ++i)
    for_each_layer_tensor(layers_[static_cast<std::size_t>(i)], [&](const char* suffix, const torch::Tensor& t) {
      out.emplace_back(layer_name(static_cast<std::size_t>(i), suffix), t);
    });
  if (last == blocks + 2) {
    out.emplace_back("model.norm.weight", norm_);
    if (!config_.tie_word_embeddings)
      out.emplace_back("lm_head.weight", lm_head_);
    else if (first > 0)
      out.emplace_back("model.embed_tokens.weight", lm_head_);
  }
  return out;
}

void LlamaModel::shard_for_tensor_parallel(TensorParallelGroup& group) {
  if (tp_ != nullptr) throw std::logic_error("the model is already sharded");
  check_tensor_parallel(config_, group.size());
  const bool aliased = lm_head_.defined() && lm_head_.is_same(embed_tokens_);
  torch::NoGradGuard no_grad;
  auto shard = [&](torch::Tensor& t, const std::string& name) {
    if (!t.defined()) return;
    const auto spec = shard_spec(config_, name, group.rank(), group.size());
    if (spec.dim >= 0) t = t.narrow(spec.dim, spec.offset, spec.length).clone();
  };
  shard(embed_tokens_, "model.embed_tokens.weight");
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for_each_layer_tensor(layers_[i], [&](const char* suffix, torch::Tensor& t) { shard(t, layer_name(i, suffix)); });
  if (aliased) {
    lm_head_ = embed_tokens_;
  } else {
    shard(lm_head_, "lm_head.weight");
  }
  tp_ = &group;
}

std::int64_t LlamaModel::vocab_start() const { return tp_ ? config_.vocab_size / tp_->size() * tp_->rank() : 0; }

torch::Tensor LlamaModel::separate_tied_head() {
  if (!config_.tie_word_embeddings) return {};
  if (lm_head_.defined() && lm_head_.is_same(embed_tokens_)) lm_head_ = embed_tokens_.detach().clone();
  return lm_head_;
}

void LlamaModel::keep_only_layers(int first, int last) {
  const int blocks = static_cast<int>(layers_.size());
  named_parameters(first, last);  // checks the range
  const bool head = last == blocks + 2;
  if (first > 0) embed_tokens_ = torch::Tensor();  // a tied head keeps its own handle (lm_head_)
  if (!head) {
    norm_ = torch::Tensor();
    lm_head_ = torch::Tensor();
  }
  for (int i = 0; i < blocks; ++i)
    if (i < first - 1 || i >= last - 1) layers_[static_cast<std::size_t>(i)] = LlamaLayerWeights{};
}

void LlamaModel::load_parameters(const std::vector<std::pair<std::string, torch::Tensor>>& values) {
  std::map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, t] : values) by_name[name] = &t;
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw InputError("missing tensor '" + name + "'");
    if (it->second->sizes() != t.sizes())
      throw InputError("tensor '" + name + "' has shape " + shape_text(it->second->sizes().vec()) + ", expected " +
                       shape_text(t.sizes().vec()));
    t.copy_(*it->second);
  }
}

torch::Tensor LlamaModel::rms_norm(const torch::Tensor& x, const torch::Tensor& weight) const {
  // In float32 whatever the model dtype, as the reference implementation does.
  auto x32 = x.to(torch::kFloat32);
  auto variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x32 * torch::rsqrt(variance + config_.rms_norm_eps)).to(x.scalar_type());
}

torch::Tensor LlamaModel::project(std::size_t layer, Projection which, const torch::Tensor& x,
                                  const CacheStep* step) const {
  if (step && step->real_positions && x.dim() == 3) {
    const auto& index = *step->real_positions;
    const std::int64_t B = x.size(0), T = x.size(1);
    auto y =
        project_rows(layer, which, x.reshape({B * T, x.size(2)}).index_select(0, index), step->position_overlay.get());
    auto out = torch::zeros({B * T, y.size(1)}, y.options());
    out.index_copy_(0, index, y);
    return out.view({B, T, y.size(1)});
  }
  return project_rows(layer, which, x, step ? step->overlay : nullptr);
}

torch::Tensor LlamaModel::project_rows(std::size_t layer, Projection which, const torch::Tensor& x,
                                       const WeightOverlay* overlay) const {
  const auto& w = layers_[layer];
  const torch::Tensor* weight = nullptr;
  switch (which) {
    case Projection::kQ:
      weight = &w.q_proj;
      break;
    case Projection::kK:
      weight = &w.k_proj;
      break;
    case Projection::kV:
      weight = &w.v_proj;
      break;
    case Projection::kO:
      weight = &w.o_proj;
      break;
    case Projection::kGate:
      weight = &w.gate_proj;
      break;
    case Projection::kUp:
      weight = &w.up_proj;
      break;
    case Projection::kDown:
      weight = &w.down_proj;
      break;
  }
  if (overlay) {
    auto merged = overlay->linear(layer, which, x, *weight);
    if (merged.defined()) return merged;
  }
  auto out = inference_linear(x, *weight);
  if (overlay) overlay->add_linear(layer, which, x, out);
  return out;
}

torch::Tensor LlamaModel::norm(std::size_t layer, NormSlot which, const torch::Tensor& x, const CacheStep* step) const {
  const torch::Tensor& base = which == NormSlot::kFinal   ? norm_
                              : which == NormSlot::kInput ? layers_[layer].input_layernorm
                                                          : layers_[layer].post_attention_layernorm;
  return rms_norm(x, step && step->overlay ? step->overlay->norm_weight(layer, which, base) : base);
}

torch::Tensor LlamaModel::attention(std::size_t layer, const torch::Tensor& x, const torch::Tensor& cos,
                                    const torch::Tensor& sin, const torch::Tensor& positions, CacheStep* step) const {
  // This rank's heads under tensor parallelism, all of them otherwise.
  const std::int64_t parts = tp_ ? tp_->size() : 1;
  const std::int64_t B = x.size(0), T = x.size(1), H = config_.num_attention_heads / parts,
                     KV = config_.num_key_value_heads / parts, D = config_.head_dim, rep = H / KV;
  auto q = project(layer, Projection::kQ, x, step).view({B, T, H, D}).transpose(1, 2);
  auto k = project(layer, Projection::kK, x, step).view({B, T, KV, D}).transpose(1, 2);
  auto v = project(layer, Projection::kV, x, step).view({B, T, KV, D}).transpose(1, 2);
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;

  torch::Tensor keys = k, values = v;
  torch::Tensor key_positions;
  if (step) {
    auto& cache_k = step->cache->keys_[layer];
    auto& cache_v = step->cache->values_[layer];
    for (std::int64_t b = 0; b < B; ++b) {
      auto slot = (*step->slots)[static_cast<std::size_t>(b)];
      auto count = (*step->counts)[static_cast<std::size_t>(b)];
      if (count == 0) continue;
      auto start = step->starts[static_cast<std::size_t>(b)];
      cache_k[slot].narrow(1, start, count).copy_(k[b].narrow(1, 0, count));
      cache_v[slot].narrow(1, start, count).copy_(v[b].narrow(1, 0, count));
    }
    if (step->slot_index) {  // gathers only the filled positions, not the whole context of each slot
      keys = cache_k.narrow(2, 0, step->key_length).index_select(0, *step->slot_index);
      values = cache_v.narrow(2, 0, step->key_length).index_select(0, *step->slot_index);
    } else {
      keys = cache_k.narrow(0, (*step->slots)[0], B).narrow(2, 0, step->key_length);
      values = cache_v.narrow(0, (*step->slots)[0], B).narrow(2, 0, step->key_length);
    }
    key_positions = torch::arange(step->key_length, torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
  } else {
    key_positions = torch::arange(T, torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
  }
  const std::int64_t L = keys.size(2);
  // Grouped-query attention without copying keys: the `rep` query heads of
  // one key/value head become extra rows of that head's product.
  auto grouped_q = q.reshape({B, KV, rep * T, D});
  auto scores = torch::matmul(grouped_q, keys.transpose(2, 3)) / std::sqrt(static_cast<double>(D));
  // Masked where the key lies after the query's position.
  auto masked = key_positions.view({1, 1, 1, 1, L}) > positions.view({B, 1, 1, T, 1});
  scores = scores.view({B, KV, rep, T, L}).masked_fill(masked, -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type()).view({B, KV, rep * T, L});
  return torch::matmul(probs, values).view({B, H, T, D}).transpose(1, 2).reshape({B, T, H * D});
}

std::pair<torch::Tensor, torch::Tensor> LlamaModel::rotary(const torch::Tensor& positions) const {
  auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq_.view({1, 1, -1});
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype_).unsqueeze(1), emb.sin().to(dtype_).unsqueeze(1)};
}

torch::Tensor LlamaModel::embed(const torch::Tensor& tokens) const {
  check_tokens(tokens, config_.vocab_size);
  return torch::embedding(embed_tokens_, tokens);
}

torch::Tensor LlamaModel::head_input(const torch::Tensor& hidden) const {
  torch::NoGradGuard no_grad;
  return rms_norm(hidden, norm_);
}

LlamaModel::LayerInputs LlamaModel::layer_inputs(std::size_t i, const torch::Tensor& hidden) const {
  torch::NoGradGuard no_grad;
  const auto& w = layers_.at(i);
  auto positions = torch::arange(hidden.size(1), torch::TensorOptions().dtype(torch::kInt64).device(hidden.device()))
                       .unsqueeze(0)
                       .expand({hidden.size(0), hidden.size(1)});
  auto [cos, sin] = rotary(positions);
  LayerInputs in;
  in.attention_in = rms_norm(hidden, w.input_layernorm);
  in.projection_in = attention(i, in.attention_in, cos, sin, positions, nullptr);
  auto h = hidden + torch::linear(in.projection_in, w.o_proj);
  in.mlp_in = rms_norm(h, w.post_attention_layernorm);
  in.down_in = torch::silu(torch::linear(in.mlp_in, w.gate_proj)) * torch::linear(in.mlp_in, w.up_proj);
  in.output = h + torch::linear(in.down_in, w.down_proj);
  return in;
}

torch::Tensor LlamaModel::run_layers(torch::Tensor hidden, const torch::Tensor& positions, CacheStep* step) const {
  hidden = run_blocks(std::move(hidden), positions, 0, layers_.size(), step);
  return norm(0, NormSlot::kFinal, hidden, step);
}

torch::Tensor LlamaModel::run_blocks(torch::Tensor hidden, const torch::Tensor& positions, std::size_t first,
                                     std::size_t last, CacheStep* step) const {
  auto [cos, sin] = rotary(positions);
  // Under tensor parallelism each rank computes its heads and MLP columns:
  // the norms' outputs enter the column-parallel layers (q/k/v, gate/up)
  // whole, the row-parallel outputs (o, down) are summed over the group.
  auto enter = [&](torch::Tensor x) { return tp_ ? copy_to_tensor_parallel(x, *tp_) : x; };
  auto leave = [&](torch::Tensor x) { return tp_ ? reduce_from_tensor_parallel(x, *tp_) : x; };
  for (std::size_t i = first; i < last; ++i) {
    auto attended = attention(i, enter(norm(i, NormSlot::kInput, hidden, step)), cos, sin, positions, step);
    hidden = hidden + leave(project(i, Projection::kO, attended, step));
    auto x = enter(norm(i, NormSlot::kPostAttention, hidden, step));
    auto gated = torch::silu(project(i, Projection::kGate, x, step)) * project(i, Projection::kUp, x, step);
    hidden = hidden + leave(project(i, Projection::kDown, gated, step));
  }
  return hidden;
}

torch::Tensor LlamaModel::forward(const torch::Tensor& tokens) const {
  return forward_layers(tokens, 0, static_cast<int>(layers_.size()) + 2);
}

torch::Tensor LlamaModel::forward_layers(const torch::Tensor& input, int first, int last) const {
  const int blocks = static_cast<int>(layers_.size());
  if (first < 0 || last > blocks + 2 || first >= last)
    throw InputError("layers [" + std::to_string(first) + ", " + std::to_string(last) + ") are not a range of this " +
                     std::to_string(blocks + 2) + "-layer model");
  torch::Tensor hidden = input;
  const auto T = input.size(1);
  if (first == 0) {
    check_tokens(input, config_.vocab_size);
    if (tp_ == nullptr) {
      hidden = torch::embedding(embed_tokens_, input);
    } else {
      // Vocabulary-parallel: each rank looks up the ids in its rows, zeros for the rest, and the group sums.
      const auto rows = embed_tokens_.size(0), start = vocab_start();
      auto local = input - start;
      auto outside = (local < 0) | (local >= rows);
      hidden = torch::embedding(embed_tokens_, local.clamp(0, rows - 1)).masked_fill(outside.unsqueeze(-1), 0.0);
      hidden = reduce_from_tensor_parallel(hidden, *tp_);
    }
  } else if (input.dim() != 3 || input.size(2) != config_.hidden_size) {
    throw InputError("a stage that starts at layer " + std::to_string(first) + " takes hidden states [B, T, " +
                     std::to_string(config_.hidden_size) + "]");
  }
  if (T > config_.max_position_embeddings)
    throw InputError("sequence of " + std::to_string(T) + " tokens is longer than max_position_embeddings (" +
                     std::to_string(config_.max_position_embeddings) + ")");
  const auto first_block = static_cast<std::size_t>(std::max(first - 1, 0));
  const auto last_block = static_cast<std::size_t>(std::clamp(last - 1, 0, blocks));
  if (first_block < last_block) {
    auto positions = torch::arange(T, torch::TensorOptions().dtype(torch::kInt64).device(hidden.device()))
                         .unsqueeze(0)
                         .expand({hidden.size(0), T});
    hidden = run_blocks(std::move(hidden), positions, first_block, last_block, nullptr);
  }
  if (last < blocks + 2) return hidden;
  hidden = norm(0, NormSlot::kFinal, hidden, nullptr);
  if (tp_) hidden = copy_to_tensor_parallel(hidden, *tp_);
  return torch::linear(hidden, lm_head_).to(torch::kFloat32);
}

torch::Tensor LlamaModel::forward_cached(KvCache& cache, const std::vector<std::int64_t>& slots,
                                         const torch::Tensor& tokens, const std::vector<std::int64_t>& counts,
                                         bool all_positions, const WeightOverlay* overlay) const {
  check_tokens(tokens, config_.vocab_size);
  if (tp_ != nullptr) throw UsageError("a tensor-parallel shard of a model trains; it does not run cached inference");
  const std::int64_t B = tokens.size(0), T = tokens.size(1);
  if (static_cast<std::int64_t>(slots.size()) != B || static_cast<std::int64_t>(counts.size()) != B)
    throw InputError("forward_cached: one slot and one count per row are needed");
  CacheStep step{&cache, &slots, &counts, {}, 0, std::nullopt, overlay, std::nullopt, nullptr};
  std::vector<std::int64_t> position_rows;
  bool contiguous = true;
  for (std::int64_t b = 0; b < B; ++b) {
    auto slot = slots[static_cast<std::size_t>(b)], count = counts[static_cast<std::size_t>(b)];
    if (slot < 0 || slot >= cache.slots()) throw InputError("cache slot " + std::to_string(slot) + " does not exist");
    if (count < 0 || count > T) throw InputError("row " + std::to_string(b) + " has an invalid token count");
    auto start = cache.length(slot);
    if (start + count > cache.max_length() || start + count > config_.max_position_embeddings)
      throw InputError("sequence in cache slot " + std::to_string(slot) + " would grow to " +
                       std::to_string(start + count) + " tokens, beyond the cache's " +
                       std::to_string(std::min(cache.max_length(), config_.max_position_embeddings)));
    step.starts.push_back(start);
    step.key_length = std::max(step.key_length, std::min(start + T, cache.max_length()));
    contiguous = contiguous && slot == slots[0] + b;
    for (std::int64_t t = 0; t < T; ++t) position_rows.push_back(start + t);
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t c = b + 1; c < B; ++c)
      if (slots[static_cast<std::size_t>(b)] == slots[static_cast<std::size_t>(c)])
        throw InputError("cache slot " + std::to_string(slots[static_cast<std::size_t>(b)]) +
                         " appears twice in a batch");
  if (!contiguous)
    step.slot_index = torch::tensor(slots, torch::TensorOptions().dtype(torch::kInt64)).to(tokens.device());
  auto positions =
      torch::tensor(position_rows, torch::TensorOptions().dtype(torch::kInt64)).view({B, T}).to(tokens.device());
  std::vector<std::int64_t> real;  // flat indices of the real positions, when some row is padded
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < counts[static_cast<std::size_t>(b)]; ++t) real.push_back(b * T + t);
  if (!real.empty() && static_cast<std::int64_t>(real.size()) < B * T) {
    if (overlay) step.position_overlay = overlay->for_positions(counts);
    if (!overlay || step.position_overlay)
      step.real_positions = torch::tensor(real, torch::TensorOptions().dtype(torch::kInt64)).to(tokens.device());
  }

  torch::NoGradGuard no_grad;
  auto embedded = torch::embedding(embed_tokens_, tokens);
  if (overlay) overlay->add_embedding(tokens, embedded);
  auto hidden = run_layers(embedded, positions, &step);
  for (std::int64_t b = 0; b < B; ++b)
    cache.lengths_[static_cast<std::size_t>(slots[static_cast<std::size_t>(b)])] += counts[static_cast<std::size_t>(b)];
  auto head = [&](const torch::Tensor& h) {
    auto logits = torch::linear(h, lm_head_);
    if (overlay) overlay->add_head(h, logits);
    return logits.to(torch::kFloat32);
  };
  if (all_positions) return head(hidden);
  std::vector<std::int64_t> last(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b)
    last[static_cast<std::size_t>(b)] = std::max<std::int64_t>(counts[static_cast<std::size_t>(b)] - 1, 0);
  auto index = torch::tensor(last, torch::TensorOptions().dtype(torch::kInt64)).to(tokens.device());
  auto rows = hidden.gather(1, index.view({B, 1, 1}).expand({B, 1, hidden.size(2)})).squeeze(1);
  return head(rows);
}

torch::Tensor next_token_losses(const torch::Tensor& logits, const torch::Tensor& tokens) {
  const auto V = logits.size(-1);
  auto predictions = logits.narrow(1, 0, logits.size(1) - 1).reshape({-1, V});
  auto targets = tokens.narrow(1, 1, tokens.size(1) - 1).reshape({-1}).to(logits.device());
  return torch::nn::functional::cross_entropy(predictions, targets,
                                              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
}

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& tokens,
                             const std::optional<torch::Tensor>& mask) {
  auto losses = next_token_losses(logits, tokens);
  if (!mask) return losses.mean();
  auto weights = mask->narrow(1, 1, mask->size(1) - 1).reshape({-1}).to(losses.scalar_type());
  return (losses * weights).sum() / weights.sum().clamp_min(1.0);
}

}  // namespace fleet::model
