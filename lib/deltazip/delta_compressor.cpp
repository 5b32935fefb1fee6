#include "deltazip/delta_compressor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/output_check.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "deltazip/container.h"
#include "deltazip/obs_compressor.h"
#include "deltazip/reconstruct.h"
#include "model/cpu_threads.h"
#include "model/llama.h"
#include "model/synthetic_tasks.h"
#include "model/tensor_bridge.h"
#include "model/tokenizer.h"
#include "model/trainer.h"

namespace fleet::deltazip {
namespace {

using model::LlamaConfig;
using model::LlamaModel;

// Base and target must be the same architecture with the same shapes.
void check_same_shape(const LlamaConfig& base, const LlamaConfig& target) {
  auto check = [](const char* field, std::int64_t a, std::int64_t b) {
    if (a != b)
      throw InputError(std::string("base and target differ in ") + field + ": " + std::to_string(a) + " vs " +
                       std::to_string(b));
  };
  check("vocab_size", base.vocab_size, target.vocab_size);
  check("hidden_size", base.hidden_size, target.hidden_size);
  check("intermediate_size", base.intermediate_size, target.intermediate_size);
  check("num_hidden_layers", base.num_hidden_layers, target.num_hidden_layers);
  check("num_attention_heads", base.num_attention_heads, target.num_attention_heads);
  check("num_key_value_heads", base.num_key_value_heads, target.num_key_value_heads);
  check("head_dim", base.head_dim, target.head_dim);
  check("tie_word_embeddings", base.tie_word_embeddings, target.tie_word_embeddings);
}

torch::Tensor base_tensor(const SafetensorsCheckpoint& base, const std::string& name) {
  if (!base.contains(name)) throw InputError("the base model has no tensor '" + name + "'");
  return model::to_torch(base.view(name)).to(torch::kFloat32);
}

// Calibration sequences [N, T]: windows of the tokenized text.
torch::Tensor calibration_tokens(const CompressCommand& c, const model::Tokenizer& tokenizer) {
  std::string text;
  if (!c.calib.empty()) {
    text = read_file(c.calib);
  } else {
    // The built-in corpus: the base language and every task, interleaved.
    for (auto task : {model::SyntheticTask::kBase, model::SyntheticTask::kCopy, model::SyntheticTask::kReverse,
                      model::SyntheticTask::kSort, model::SyntheticTask::kAdd})
      text += model::make_synthetic_corpus(task, 400, 12345);
  }
  auto ids = tokenizer.encode(text, true);
  const auto needed = static_cast<std::size_t>(c.calib_samples * c.seq_len);
  if (ids.size() < static_cast<std::size_t>(c.seq_len))
    throw InputError("the calibration text has " + std::to_string(ids.size()) + " tokens, fewer than --seq-len");
  std::vector<std::int64_t> flat;
  flat.reserve(needed);
  for (std::size_t i = 0; flat.size() < needed; i = (i + 1) % ids.size()) flat.push_back(ids[i]);
  return torch::tensor(flat, torch::kInt64).view({c.calib_samples, c.seq_len});
}

// The layer's output error of a compressed delta q, weighted by the
// Hessian of its inputs: tr((delta - q) H (delta - q)^T).
double weighted_error(const torch::Tensor& delta, const torch::Tensor& q, const torch::Tensor& h) {
  auto e = (delta - q).to(torch::kFloat64);
  return torch::trace(e.matmul(h.to(torch::kFloat64)).matmul(e.t())).item<double>();
}

torch::Tensor hessian_of(const torch::Tensor& inputs) {
  auto x = inputs.reshape({-1, inputs.size(-1)}).to(torch::kFloat64);
  return (2.0 / static_cast<double>(x.size(0)) * x.t().matmul(x)).to(torch::kFloat32);
}

nlohmann::json settings_json(const CompressCommand& c) {
  return {{"method", c.method},
          {"bits", c.bits},
          {"sparsity", c.sparsity},
          {"group_size", c.group_size},
          {"symmetric", c.symmetric},
          {"act_order", c.act_order},
          {"damp", c.damp},
          {"block_size", c.block_size},
          {"calibration", c.calib.empty() ? std::string("built-in synthetic corpus") : c.calib.filename().string()},
          {"calib_samples", c.calib_samples},
          {"seq_len", c.seq_len},
          {"dense_policy", c.dense_policy},
          {"embedding_bits", c.dense_policy == "full" ? 0 : c.embedding_bits},
          {"zstd_level", c.zstd_level}};
}

void add_dense_tensor(DeltaWriter& writer, const std::string& name, const torch::Tensor& target,
                      const SafetensorsCheckpoint& base, const CompressCommand& c) {
  torch::Tensor stored;
  DenseKind kind;
  const auto host = target.to(torch::kCPU);
  // The embedding is a lookup table: a fine-tune moves the rows of the
  // tokens it saw. Those rows alone, quantized per row.
  if (c.dense_policy != "full" && c.embedding_bits > 0 && name == "model.embed_tokens.weight") {
    const auto delta = (host.to(torch::kFloat32) - base_tensor(base, name)).contiguous();
    writer.add_row_delta(name, encode_row_delta({delta.data_ptr<float>(), static_cast<std::size_t>(delta.numel())},
                                                delta.size(0), delta.size(1), c.embedding_bits));
    return;
  }
  if (c.dense_policy == "full") {
    stored = host.contiguous();
    kind = DenseKind::kFull;
  } else {
    stored = (host.to(torch::kFloat32) - base_tensor(base, name)).to(torch::kHalf).contiguous();
    kind = DenseKind::kDelta;
  }
  auto dtype = model::dtype_of(stored.scalar_type());
  writer.add_dense(name, kind, dtype, stored.sizes().vec(),
                   {static_cast<const std::byte*>(stored.data_ptr()), stored.nbytes()});
}

// The compression options of `c`, checked, and every other setting of `c`
// checked: UsageError before any file is read.
CompressionOptions checked_options(const CompressCommand& c) {
  CompressionOptions options;
  options.bits = c.bits;
  options.sparsity = SparsityPattern::parse(c.sparsity);
  options.group_size = c.group_size;
  options.symmetric = c.symmetric;
  options.act_order = c.act_order;
  options.damp = c.damp;
  options.block_size = c.block_size;
  options.validate();
  if (c.method != "obs" && c.method != "rtn") throw UsageError("--method must be obs or rtn");
  if (c.dense_policy != "delta-zstd" && c.dense_policy != "full")
    throw UsageError("--dense-policy must be delta-zstd or full");
  if (c.calib_samples < 0 || c.seq_len < 2)
    throw UsageError("--calib-samples must be 0 (automatic) or positive, --seq-len at least 2");
  if (c.zstd_level < 1 || c.zstd_level > 22) throw UsageError("--zstd-level must be 1 to 22");
  if (c.embedding_bits != 0 && (c.embedding_bits < 2 || c.embedding_bits > 8))
    throw UsageError("--embedding-bits must be 0 (dense float16) or 2 to 8");
  return options;
}

// Compresses one linear layer's delta into the container: by OBS with the
// Hessian of its inputs, or round-to-nearest without one. Sums the OBS
// output error (and round-to-nearest's, when compared).
struct LinearCompressor {
  DeltaWriter& writer;
  const CompressionOptions& options;
  bool compare_with_rtn = false;
  double obs_error = 0, rtn_error = 0;

  // The dequantized delta as stored.
  torch::Tensor add(const std::string& name, const torch::Tensor& delta, const torch::Tensor& hessian) {
    if (!hessian.defined()) {
      auto compressed = rtn_compress(delta, options);
      writer.add_packed(name, compressed.pack(options));
      return compressed.dequantized;
    }
    auto compressed = obs_compress(delta, hessian, options);
    writer.add_packed(name, compressed.pack(options));
    obs_error += weighted_error(delta, compressed.dequantized, hessian);
    if (compare_with_rtn) rtn_error += weighted_error(delta, rtn_compress(delta, options).dequantized, hessian);
    return compressed.dequantized;
  }
};

// The decoder layers' linear deltas, layer by layer. With calibration
// `hidden` holds the calibration inputs' hidden states: each layer's
// Hessians come from its inputs in the fine-tuned model whose earlier layers
// already carry their compressed deltas, and `hidden` leaves as the last
// layer's output.
void compress_layers(LlamaModel& target, const SafetensorsCheckpoint& base, LinearCompressor& linears,
                     torch::Tensor& hidden, torch::Device device) {
  const bool calibrate = hidden.defined();
  Progress progress("compress", target.num_layers(), "layers");
  for (std::size_t l = 0; l < target.num_layers(); ++l) {
    std::map<std::string, torch::Tensor> hessians;
    if (calibrate) {
      auto inputs = target.layer_inputs(l, hidden);
      hessians = {{"attention", hessian_of(inputs.attention_in)},
                  {"projection", hessian_of(inputs.projection_in)},
                  {"mlp", hessian_of(inputs.mlp_in)},
                  {"down", hessian_of(inputs.down_in)}};
    }
    auto& w = target.layer(l);
    const std::vector<std::tuple<const char*, torch::Tensor*, const char*>> layer_linears{
        {"self_attn.q_proj.weight", &w.q_proj, "attention"}, {"self_attn.k_proj.weight", &w.k_proj, "attention"},
        {"self_attn.v_proj.weight", &w.v_proj, "attention"}, {"self_attn.o_proj.weight", &w.o_proj, "projection"},
        {"mlp.gate_proj.weight", &w.gate_proj, "mlp"},       {"mlp.up_proj.weight", &w.up_proj, "mlp"},
        {"mlp.down_proj.weight", &w.down_proj, "down"}};
    for (const auto& [suffix, weight, input] : layer_linears) {
      const std::string name = "model.layers." + std::to_string(l) + "." + suffix;
      auto base_w = base_tensor(base, name).to(device);
      auto stored = linears.add(name, *weight - base_w, calibrate ? hessians.at(input) : torch::Tensor());
      if (calibrate) weight->copy_(base_w + stored);
    }
    if (calibrate) hidden = target.layer_inputs(l, hidden).output;
    progress.advance();
  }
  progress.finish();
}

}  // namespace

std::int64_t default_calibration_samples(std::int64_t hidden_size, std::int64_t intermediate_size,
                                         std::int64_t seq_len) {
  const std::int64_t widest = std::max(hidden_size, intermediate_size);
  return std::clamp<std::int64_t>((2 * widest + seq_len - 1) / std::max<std::int64_t>(seq_len, 1), 8, 64);
}

CompressResult compress_delta(const CompressCommand& command) {
  CompressCommand c = command;
  model::set_cpu_threads(c.threads);
  const CompressionOptions options = checked_options(c);
  OutputCheck()
      .input(c.base, "--base")
      .input(c.target, "--target")
      .input(c.calib, "--calib")
      .file(c.output, "--output")
      .check(Existing::kNeedsForce, c.force);
  if (!c.calib.empty()) check_input_file(c.calib);

  // Validate both models before any work.
  const auto device = model::torch_device(model::resolve_device(c.device));
  const auto base_config = model::load_llama_config(c.base);
  if (c.calib_samples == 0)
    c.calib_samples = default_calibration_samples(base_config.hidden_size, base_config.intermediate_size, c.seq_len);
  auto target = LlamaModel::load(c.target, torch::kFloat32, device);
  check_same_shape(base_config, target.config());
  SafetensorsCheckpoint base(model::model_weights_path(c.base));
  // Shapes from the headers alone: no tensor data is read before the work starts.
  for (const auto& [name, t] : target.named_parameters()) {
    if (!base.contains(name)) throw InputError("the base model has no tensor '" + name + "'");
    if (base.info(name).shape != t.sizes().vec()) throw InputError("base and target shapes differ for '" + name + "'");
  }
  // Round-to-nearest needs no calibration: no tokens, no forward passes.
  const bool calibrate = c.method == "obs";
  torch::NoGradGuard no_grad;
  torch::Tensor hidden;
  if (calibrate) hidden = target.embed(calibration_tokens(c, model::Tokenizer::load(c.target)).to(device));

  DeltaHeader header;
  header.settings_json = settings_json(c).dump();
  header.base_identity = base_identity(c.base);
  header.config_json = read_file(c.target / "config.json");
  DeltaWriter writer(c.output, header, c.zstd_level);
  const auto started = std::chrono::steady_clock::now();
  LinearCompressor linears{writer, options, c.compare_with_rtn || spdlog::should_log(spdlog::level::debug)};
  compress_layers(target, base, linears, hidden, device);
  // The LM head is a linear layer too, its input the final norm of the last
  // layer's output. A tied head is the embedding matrix, which a lookup
  // also reads: it stays dense below.
  std::set<std::string> packed{};
  if (!target.config().tie_word_embeddings) {
    const std::string name = "lm_head.weight";
    for (const auto& [param, head] : target.named_parameters()) {
      if (param != name) continue;
      linears.add(name, head - base_tensor(base, name).to(device),
                  calibrate ? hessian_of(target.head_input(hidden)) : torch::Tensor());
    }
    packed.insert(name);
  }
  // Embeddings and norms.
  for (const auto& [name, t] : target.named_parameters()) {
    if (name.find("_proj.weight") != std::string::npos || packed.count(name)) continue;
    add_dense_tensor(writer, name, t, base, c);
  }
  CompressResult result;
  result.output = c.output;
  result.bytes = writer.commit();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.parameters = target.config().parameter_count();
  if (calibrate) {
    result.weighted_error = linears.obs_error;
    if (c.compare_with_rtn) result.weighted_error_rtn = linears.rtn_error;
  }
  result.settings_json = settings_json(c).dump();
  return result;
}

torch::Tensor dense_tensor(const DenseEntry& entry) {
  auto stored =
      torch::empty(entry.tensor.shape, torch::TensorOptions().dtype(model::torch_scalar_type(entry.tensor.dtype)));
  std::memcpy(stored.data_ptr(), entry.tensor.data.data(), entry.tensor.data.size());
  return stored;
}

model::LlamaConfig delta_config(const DeltaReader& reader) {
  auto config_doc = parse_json(reader.header().config_json, reader.path().string() + ":config");
  return model::parse_llama_config(config_doc.root());
}

void check_same_architecture(const LlamaConfig& base, const LlamaConfig& delta, const std::string& source) {
  try {
    check_same_shape(base, delta);
  } catch (const InputError& e) {
    throw InputError(source + ": not a delta of this base model's architecture (" + e.what() + ")");
  }
}

LlamaModel reconstruct_model(const DeltaReader& reader, const LlamaModel& base, torch::Device device) {
  auto config = delta_config(reader);
  check_same_architecture(base.config(), config, reader.path().string());
  std::map<std::string, torch::Tensor> base_params;
  for (const auto& [name, t] : base.named_parameters()) base_params[name] = t;
  torch::NoGradGuard no_grad;
  auto model = LlamaModel::uninitialized(config, torch::kFloat32, device);  // every tensor is filled below
  std::vector<std::pair<std::string, torch::Tensor>> values;
  for (const auto& [name, t] : model.named_parameters()) {
    const auto base_value = base_params.at(name).to(torch::kCPU, torch::kFloat32);
    if (std::binary_search(reader.packed_names().begin(), reader.packed_names().end(), name)) {
      auto packed = reader.packed(name);
      auto delta = torch::empty({packed.rows, packed.cols}, torch::kFloat32);
      unpack_matrix(packed, {delta.data_ptr<float>(), static_cast<std::size_t>(delta.numel())});
      values.emplace_back(name, base_value + delta);
    } else if (std::binary_search(reader.dense_names().begin(), reader.dense_names().end(), name)) {
      auto entry = reader.dense(name);
      auto stored = dense_tensor(entry);
      values.emplace_back(
          name, entry.kind == DenseKind::kFull ? stored.to(torch::kFloat32) : base_value + stored.to(torch::kFloat32));
    } else {
      throw InputError(reader.path().string() + ": no entry for tensor '" + name + "'");
    }
  }
  model.load_parameters(values);
  return model;
}

int run_decompress(const DecompressCommand& c) {
  OutputCheck()
      .input(c.delta, "delta")
      .input(c.base, "--base")
      .folder(c.output, "--output")
      .check(Existing::kNeedsForce, c.force);
  DeltaReader reader(c.delta);
  const auto identity = base_identity(c.base);
  if (identity != reader.header().base_identity)
    throw InputError(c.delta.string() + " was made for a base model with identity " + reader.header().base_identity +
                     ", but " + c.base.string() + " is " + identity + "; refusing to apply it");
  const auto out_type = model::parse_torch_dtype(delta_config(reader).torch_dtype);
  auto model = reconstruct_model(reader, LlamaModel::load(c.base));
  write_directory_atomically(c.output, [&](const std::filesystem::path& dir) {
    model.save(dir, out_type);
    write_file_atomically(dir / "config.json", reader.header().config_json);
    model::copy_tokenizer_files(c.base, dir);
  });
  spdlog::info("wrote {} (base {} + delta {})", c.output.string(), c.base.string(), c.delta.string());
  return 0;
}

}  // namespace fleet::deltazip
