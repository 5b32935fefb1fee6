#include "deltazip/torch/delta_compressor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include <fmt/format.h>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/output_check.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "common/temporary_folder.h"
#include "deltazip/container.h"
#include "deltazip/size_budget.h"
#include "deltazip/torch/low_rank_compressor.h"
#include "deltazip/torch/obs_compressor.h"
#include "deltazip/torch/reconstruct.h"
#include "model/model_folder.h"
#include "model/synthetic_tasks.h"
#include "model/torch/cpu_threads.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "model/train_options.h"
#include "text/tokenizer.h"

namespace fleet::deltazip {
namespace {

using model::LlamaConfig;
using model::LlamaModel;

constexpr const char* kHead = "lm_head.weight";

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
torch::Tensor calibration_tokens(const CompressCommand& c, const text::Tokenizer& tokenizer) {
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

// The settings as the container records them. With a size budget the form
// of each layer is the allocator's: the budget and how many layers took
// each form replace bits, sparsity and grid (each matrix records its own).
nlohmann::json settings_json(const CompressCommand& c, std::uint64_t budget_bytes = 0,
                             const std::map<std::string, int>& allocation = {}) {
  nlohmann::json settings = {
      {"method", c.method},
      {"act_order", c.act_order},
      {"damp", c.damp},
      {"block_size", c.block_size},
      {"calibration", c.calib.empty() ? std::string("built-in synthetic corpus") : c.calib.filename().string()},
      {"calib_samples", c.calib_samples},
      {"seq_len", c.seq_len},
      {"dense_policy", c.dense_policy},
      {"embedding_bits", c.dense_policy == "full" ? 0 : c.embedding_bits},
      {"zstd_level", c.zstd_level}};
  if (c.target_ratio > 0 || c.max_bytes > 0) {
    nlohmann::json forms = nlohmann::json::object();
    for (const auto& [form, layers] : allocation) forms[form] = layers;
    settings["budget"] = {{"bytes", budget_bytes}, {"layers_per_form", forms}};
    if (c.target_ratio > 0) settings["budget"]["target_ratio"] = c.target_ratio;
    return settings;
  }
  settings["bits"] = c.bits;
  settings["sparsity"] = c.sparsity;
  settings["group_size"] = c.group_size;
  settings["symmetric"] = c.symmetric;
  settings["grid"] = c.grid;
  if (c.rank > 0) settings["rank"] = c.rank;
  return settings;
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
  options.grid = parse_grid_fit(c.grid);
  options.rank = c.rank;
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
  if (!(c.target_ratio >= 0) || (c.target_ratio > 0 && c.target_ratio < 1))
    throw UsageError("--target-ratio must be at least 1 (times smaller than the fp16 model)");
  if (c.target_ratio > 0 && c.max_bytes > 0) throw UsageError("give --target-ratio or --max-bytes, not both");
  if ((c.target_ratio > 0 || c.max_bytes > 0) && c.rank > 0)
    throw UsageError("--rank fixes what a size budget chooses per layer; give one or the other");
  return options;
}

// What becomes of one linear layer's delta [out, in], given the Hessian of
// its inputs (undefined without calibration): returns the dequantized delta
// the later layers' calibration should see, or an undefined tensor to leave
// the layer as fine-tuned.
using LinearStep =
    std::function<torch::Tensor(const std::string& name, const torch::Tensor& delta, const torch::Tensor& hessian)>;

// One linear layer's delta in one form, as the container stores it and as
// reconstruction yields it.
struct CompressedLinear {
  std::variant<PackedMatrix, LowRankMatrix> stored;
  torch::Tensor dequantized;

  void write(DeltaWriter& writer, const std::string& name) const {
    if (const auto* low_rank = std::get_if<LowRankMatrix>(&stored))
      writer.add_low_rank(name, *low_rank);
    else
      writer.add_packed(name, std::get<PackedMatrix>(stored));
  }
  // Bytes in a container (size_budget.h's estimate).
  std::uint64_t estimated_bytes(int zstd_level, std::uint64_t overhead_per_array) const {
    if (const auto* low_rank = std::get_if<LowRankMatrix>(&stored))
      return estimated_container_bytes(low_rank->up, zstd_level, overhead_per_array) +
             estimated_container_bytes(low_rank->down, zstd_level, overhead_per_array);
    return estimated_container_bytes(std::get<PackedMatrix>(stored), zstd_level, overhead_per_array);
  }
};

// `delta` in `form`: by OBS against `hessian`, or round-to-nearest (an
// identity Hessian, no damping) where it is undefined. A low-rank form
// takes its directions from `basis` where given (computed there on first
// use, so that every rank tried on one layer shares one decomposition).
CompressedLinear compress_linear(const torch::Tensor& delta, const torch::Tensor& hessian,
                                 const CompressionOptions& form, std::optional<LowRankBasis>* basis = nullptr) {
  if (form.low_rank()) {
    auto o = form;
    if (!hessian.defined()) o.damp = 0;
    std::optional<LowRankBasis> own;
    std::optional<LowRankBasis>& directions = basis ? *basis : own;
    if (!directions)
      directions.emplace(
          delta, hessian.defined() ? hessian : torch::eye(delta.size(1), delta.options().dtype(torch::kFloat32)),
          o.damp);
    auto compressed = directions->compress(o);
    return {compressed.pack(o), compressed.dequantized};
  }
  auto compressed = hessian.defined() ? obs_compress(delta, hessian, form) : rtn_compress(delta, form);
  return {compressed.pack(form), compressed.dequantized};
}

// Compresses each linear layer's delta into the container in the form
// `form_of` names for it. Sums the OBS output error (and round-to-nearest's,
// when compared).
struct LinearCompressor {
  DeltaWriter& writer;
  std::function<const CompressionOptions&(const std::string&)> form_of;
  bool compare_with_rtn = false;
  double obs_error = 0, rtn_error = 0;

  // The dequantized delta as stored.
  torch::Tensor add(const std::string& name, const torch::Tensor& delta, const torch::Tensor& hessian) {
    const CompressionOptions& options = form_of(name);
    const auto compressed = compress_linear(delta, hessian, options);
    compressed.write(writer, name);
    if (hessian.defined()) {
      obs_error += weighted_error(delta, compressed.dequantized, hessian);
      if (compare_with_rtn)
        rtn_error += weighted_error(delta, compress_linear(delta, torch::Tensor(), options).dequantized, hessian);
    }
    return compressed.dequantized;
  }
};

// Every linear layer's delta through `step`: the decoder layers layer by
// layer, then the LM head. With calibration `hidden` holds the calibration
// inputs' hidden states: each layer's Hessians come from its inputs in the
// fine-tuned model whose earlier layers carry what `step` returned for them,
// and `hidden` leaves as the last layer's output.
void for_each_linear(LlamaModel& target, const SafetensorsCheckpoint& base, const LinearStep& step,
                     torch::Tensor& hidden, torch::Device device, const char* what) {
  const bool calibrate = hidden.defined();
  Progress progress(what, target.num_layers(), "layers");
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
      auto stored = step(name, *weight - base_w, calibrate ? hessians.at(input) : torch::Tensor());
      if (calibrate && stored.defined()) weight->copy_(base_w + stored);
    }
    if (calibrate) hidden = target.layer_inputs(l, hidden).output;
    progress.advance();
  }
  progress.finish();
  // The LM head is a linear layer too, its input the final norm of the last
  // layer's output. A tied head is the embedding matrix, which a lookup
  // also reads: it stays dense.
  if (target.config().tie_word_embeddings) return;
  for (const auto& [param, head] : target.named_parameters())
    if (param == kHead)
      step(param, head - base_tensor(base, param).to(device),
           calibrate ? hessian_of(target.head_input(hidden)) : torch::Tensor());
}

// The inputs of one compression run, checked and loaded.
struct Job {
  CompressCommand command;
  CompressionOptions options;
  torch::Device device{torch::kCPU};
  model::LlamaConfig base_config;
  // Opened once, mapped for the whole job (the target is loaded whole as a
  // model instead, and not kept mapped beside it).
  std::shared_ptr<const model::ModelFolder> base;
  DeltaHeader header;
};

LlamaModel load_target(const Job& job) { return LlamaModel::load(job.command.target, torch::kFloat32, job.device); }

// The calibration sequences on the job's device, or an undefined tensor for
// round-to-nearest, which needs no calibration.
torch::Tensor calibration_tokens_of(const Job& job) {
  if (job.command.method != "obs") return {};
  return calibration_tokens(job.command, text::Tokenizer::load(job.command.target)).to(job.device);
}

// Their embeddings in `target` (undefined without calibration).
torch::Tensor calibration_hidden(const Job& job, LlamaModel& target) {
  const auto tokens = calibration_tokens_of(job);
  return tokens.defined() ? target.embed(tokens) : torch::Tensor();
}

// Embeddings and norms (and a tied head): everything but the packed layers.
void add_dense_tensors(DeltaWriter& writer, LlamaModel& target, const SafetensorsCheckpoint& base, const Job& job) {
  for (const auto& [name, t] : target.named_parameters()) {
    if (name.find("_proj.weight") != std::string::npos || (name == kHead && !target.config().tie_word_embeddings))
      continue;
    add_dense_tensor(writer, name, t, base, job.command);
  }
}

struct Written {
  std::uint64_t bytes = 0;
  double obs_error = 0, rtn_error = 0;
};

// One container at `path`: every linear layer in the form `form_of` names.
Written write_container(const Job& job, const std::filesystem::path& path,
                        const std::function<const CompressionOptions&(const std::string&)>& form_of) {
  const CompressCommand& c = job.command;
  auto target = load_target(job);
  const SafetensorsCheckpoint& base = job.base->weights();
  torch::NoGradGuard no_grad;
  torch::Tensor hidden = calibration_hidden(job, target);
  DeltaWriter writer(path, job.header, c.zstd_level);
  LinearCompressor linears{writer, form_of, c.compare_with_rtn || spdlog::should_log(spdlog::level::debug)};
  for_each_linear(
      target, base,
      [&](const std::string& n, const torch::Tensor& d, const torch::Tensor& h) { return linears.add(n, d, h); },
      hidden, job.device, "compress");
  add_dense_tensors(writer, target, base, job);
  Written w;
  w.bytes = writer.commit();
  w.obs_error = linears.obs_error;
  w.rtn_error = linears.rtn_error;
  return w;
}

}  // namespace

std::int64_t default_calibration_samples(std::int64_t hidden_size, std::int64_t intermediate_size,
                                         std::int64_t seq_len) {
  const std::int64_t widest = std::max(hidden_size, intermediate_size);
  return std::clamp<std::int64_t>((2 * widest + seq_len - 1) / std::max<std::int64_t>(seq_len, 1), 8, 64);
}

namespace {

// The forms a size budget chooses from for each linear layer, from the
// most bytes to the fewest: uniform grids with one scale per row, dense,
// 2:4, 1-bit sign x scale, and the largest 10 % or 2 % of the delta kept.
// Which is best per byte differs by layer; the allocator measures each.
constexpr std::pair<int, const char*> kBudgetForms[] = {{4, "none"}, {4, "2:4"},  {3, "2:4"}, {2, "none"},
                                                        {2, "2:4"},  {1, "none"}, {2, "0.9"}, {2, "0.98"}};
// HDF5 metadata per array of a packed matrix (object header, chunk index,
// filter and checksum attributes), as measured on small containers; the
// allocator's estimate only: the written file is checked against the budget.
constexpr std::uint64_t kArrayOverhead = 440;

// The form whose added loss calibrates each layer's errors: 1-bit sign, in
// the middle of the ladder, large enough an error to measure and small
// enough a change that the loss still answers to it about linearly.
constexpr std::size_t kSensitivityProbe = 5;

// Low-rank forms after those, at 4 bits per factor code, by the bits per
// weight of the delta their codes take (the rank follows from each layer's
// shape): below one bit per weight they keep the directions a fine-tune
// moved along where 1-bit and pruned forms lose them.
constexpr int kLowRankBits = 4;
constexpr double kLowRankForms[] = {1.5, 1.0, 0.7, 0.5, 0.35, 0.25};

std::string form_name(const CompressionOptions& o) {
  if (o.rank > 0) return fmt::format("{}-bit rank {}", o.bits, o.rank);
  if (o.rank_bits > 0) return fmt::format("{}-bit low rank ({} bits/w)", o.bits, o.rank_bits);
  return fmt::format("{}-bit {}", o.bits, o.sparsity.to_string());
}

std::vector<CompressionOptions> budget_forms(const CompressionOptions& settings) {
  std::vector<CompressionOptions> forms;
  for (const auto& [bits, sparsity] : kBudgetForms) {
    CompressionOptions o = settings;  // damping, block size, column order
    o.bits = bits;
    o.sparsity = SparsityPattern::parse(sparsity);
    o.group_size = -1;
    o.symmetric = true;
    o.grid = GridFit::kMinMax;
    o.rank = 0;
    o.validate();
    forms.push_back(o);
  }
  for (const double rank_bits : kLowRankForms) {
    CompressionOptions o = forms.front();
    o.bits = kLowRankBits;
    o.sparsity = SparsityPattern{};
    o.rank_bits = rank_bits;
    o.validate();
    forms.push_back(o);
  }
  return forms;
}

// What each candidate form would cost and leave for every linear layer,
// and what the rest of the container takes: one sweep per form and layer,
// with each layer's Hessians from the fine-tuned model's own inputs (the
// choice of the earlier layers is not known yet).
struct Measured {
  std::vector<std::string> names;
  std::vector<std::vector<FormCost>> costs;
  std::uint64_t rest_bytes = 0;    ///< header, embeddings, norms and file metadata
  std::vector<double> loss_added;  ///< calibrated: loss added by each layer's probe form alone
};

Measured measure_forms(const Job& job, const std::vector<CompressionOptions>& forms,
                       const std::filesystem::path& scratch) {
  const CompressCommand& c = job.command;
  auto target = load_target(job);
  const SafetensorsCheckpoint& base = job.base->weights();
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = calibration_tokens_of(job);
  torch::Tensor hidden = tokens.defined() ? target.embed(tokens) : torch::Tensor();
  // A layer's output error costs the model more or less loss depending on
  // where the layer sits: each layer's errors are scaled by the loss its
  // 1-bit form adds on the calibration text per unit of its error.
  auto loss = [&] {
    auto logits = target.forward(tokens);
    const auto v = logits.size(-1);
    return torch::nn::functional::cross_entropy(logits.narrow(1, 0, tokens.size(1) - 1).reshape({-1, v}),
                                                tokens.narrow(1, 1, tokens.size(1) - 1).reshape({-1}))
        .item<double>();
  };
  const double reference = tokens.defined() ? loss() : 0.0;
  std::map<std::string, torch::Tensor> parameters;
  for (const auto& [name, t] : target.named_parameters()) parameters.emplace(name, t);
  Measured m;
  auto measure = [&](const std::string& name, const torch::Tensor& delta, const torch::Tensor& hessian) {
    std::vector<FormCost> costs;
    torch::Tensor probe;
    std::optional<LowRankBasis> basis;  // one decomposition for every low-rank form of this layer
    for (std::size_t f = 0; f < forms.size(); ++f) {
      const auto& form = forms[f];
      const auto compressed = compress_linear(delta, hessian, form, &basis);
      // Without calibration the error is the plain squared error (an identity Hessian).
      const double error = hessian.defined() ? weighted_error(delta, compressed.dequantized, hessian)
                                             : (delta - compressed.dequantized).pow(2).sum().item<double>();
      costs.push_back({compressed.estimated_bytes(c.zstd_level, kArrayOverhead), error});
      if (f == kSensitivityProbe) probe = compressed.dequantized;
    }
    if (hessian.defined()) {
      // The fine-tuned weight with this layer alone in its probe form.
      auto& weight = parameters.at(name);
      const auto fine_tuned = weight.clone();
      weight.sub_(delta).add_(probe);
      const double added = loss() - reference;
      weight.copy_(fine_tuned);
      m.loss_added.push_back(added);
      spdlog::debug("{} in {} alone adds {:.5f} to the calibration loss", name, form_name(forms[kSensitivityProbe]),
                    added);
    }
    m.names.push_back(name);
    m.costs.push_back(std::move(costs));
    return torch::Tensor();  // later layers see this one as fine-tuned
  };
  for_each_linear(target, base, measure, hidden, job.device, "measure forms");
  if (!m.loss_added.empty()) weigh_errors_by_loss(m.costs, m.loss_added, kSensitivityProbe);
  // The rest, exactly: a container of everything but the linear layers.
  DeltaWriter rest(scratch, job.header, c.zstd_level);
  add_dense_tensors(rest, target, base, job);
  m.rest_bytes = rest.commit();
  std::filesystem::remove(scratch);
  return m;
}

struct BudgetOutcome {
  Written written;
  std::vector<std::pair<std::string, std::string>> allocation;
  std::uint64_t budget_bytes = 0;
};

// Compresses to at most the budget: measures every form of every layer,
// allocates bytes to the layers where they remove the most error, writes
// the container in those forms (calibrated layer by layer as always), and
// tightens the linear layers' share when the written file is over.
BudgetOutcome compress_to_budget(Job& job) {
  const CompressCommand& c = job.command;
  BudgetOutcome out;
  const double fp16_bytes = 2.0 * static_cast<double>(job.base_config.parameter_count());
  out.budget_bytes = c.max_bytes > 0 ? c.max_bytes : static_cast<std::uint64_t>(fp16_bytes / c.target_ratio);
  const auto forms = budget_forms(job.options);
  // Containers not yet known to fit are written here, not at the output.
  TemporaryFolder scratch("dz-compress-budget");
  const auto attempt_path = scratch.path() / "attempt.h5";
  job.header.settings_json = settings_json(c).dump();
  const Measured m = measure_forms(job, forms, scratch.path() / "rest.h5");
  if (m.rest_bytes >= out.budget_bytes)
    throw UsageError(
        fmt::format("the embeddings, norms and metadata alone take {} bytes, the whole budget is {} bytes: "
                    "lower --embedding-bits or allow more bytes",
                    m.rest_bytes, out.budget_bytes));
  std::uint64_t linear_budget = out.budget_bytes - m.rest_bytes;
  constexpr int kAttempts = 4;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    const auto choice = allocate_forms(m.costs, linear_budget);
    std::map<std::string, std::size_t> form_of;
    std::map<std::string, int> counts;
    out.allocation.clear();
    for (std::size_t l = 0; l < m.names.size(); ++l) {
      form_of[m.names[l]] = choice[l];
      out.allocation.emplace_back(m.names[l], form_name(forms[choice[l]]));
      ++counts[form_name(forms[choice[l]])];
    }
    job.header.settings_json = settings_json(c, out.budget_bytes, counts).dump();
    out.written = write_container(job, attempt_path, [&](const std::string& name) -> const CompressionOptions& {
      return forms[form_of.at(name)];
    });
    if (out.written.bytes <= out.budget_bytes) {
      write_file_atomically(c.output, read_file(attempt_path));
      return out;
    }
    const std::uint64_t over = out.written.bytes - out.budget_bytes;
    spdlog::info("{} bytes, {} over the budget of {}: tightening the linear layers' share (attempt {} of {})",
                 out.written.bytes, over, out.budget_bytes, attempt, kAttempts);
    linear_budget -= std::min(linear_budget, over + out.budget_bytes / 200);
  }
  throw InputError(fmt::format("no container within {} bytes after {} attempts (the last took {})", out.budget_bytes,
                               kAttempts, out.written.bytes));
}

// The job: settings checked, inputs validated (both models' shapes from
// their headers alone: no tensor data is read before the work starts).
Job prepare_job(const CompressCommand& command) {
  Job job;
  job.command = command;
  CompressCommand& c = job.command;
  model::set_cpu_threads(c.threads);
  job.options = checked_options(c);
  OutputCheck()
      .input(c.base, "--base")
      .input(c.target, "--target")
      .input(c.calib, "--calib")
      .file(c.output, "--output")
      .check(Existing::kNeedsForce, c.force);
  if (!c.calib.empty()) check_input_file(c.calib);
  job.device = model::torch_device(model::resolve_device(c.device));
  job.base = std::make_shared<const model::ModelFolder>(c.base);
  job.base_config = job.base->config();
  if (c.calib_samples == 0)
    c.calib_samples =
        default_calibration_samples(job.base_config.hidden_size, job.base_config.intermediate_size, c.seq_len);
  const model::ModelFolder target_folder(c.target);
  const auto& target_config = target_folder.config();
  check_same_shape(job.base_config, target_config);
  const SafetensorsCheckpoint &base = job.base->weights(), &target = target_folder.weights();
  for (const auto& t : model::parameter_shapes(target_config)) {
    if (!target.contains(t.name)) throw InputError("the fine-tuned model has no tensor '" + t.name + "'");
    if (!base.contains(t.name)) throw InputError("the base model has no tensor '" + t.name + "'");
    if (base.info(t.name).shape != target.info(t.name).shape)
      throw InputError("base and target shapes differ for '" + t.name + "'");
  }
  job.header.base_identity = base_identity(*job.base);
  job.header.config_json = target_folder.config_text();
  return job;
}

}  // namespace

CompressResult compress_delta(const CompressCommand& command) {
  Job job = prepare_job(command);
  const CompressCommand& c = job.command;
  const auto started = std::chrono::steady_clock::now();
  CompressResult result;
  result.output = c.output;
  result.parameters = job.base_config.parameter_count();
  Written written;
  if (c.target_ratio > 0 || c.max_bytes > 0) {
    const BudgetOutcome outcome = compress_to_budget(job);
    written = outcome.written;
    result.allocation = outcome.allocation;
    result.budget_bytes = outcome.budget_bytes;
  } else {
    job.header.settings_json = settings_json(c).dump();
    written =
        write_container(job, c.output, [&](const std::string&) -> const CompressionOptions& { return job.options; });
  }
  result.bytes = written.bytes;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (c.method == "obs") {
    result.weighted_error = written.obs_error;
    if (c.compare_with_rtn) result.weighted_error_rtn = written.rtn_error;
  }
  result.settings_json = job.header.settings_json;
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

LlamaModel reconstruct_model(const DeltaReader& reader, const LlamaModel& base, torch::Device device,
                             const PackedAdder& add_packed) {
  auto config = delta_config(reader);
  check_same_architecture(base.config(), config, reader.path().string());
  std::map<std::string, torch::Tensor> base_params;
  for (const auto& [name, t] : base.named_parameters()) base_params[name] = t;
  auto contains = [](const std::vector<std::string>& sorted, const std::string& name) {
    return std::binary_search(sorted.begin(), sorted.end(), name);
  };
  torch::NoGradGuard no_grad;
  // The reader checked every entry's shape against the model's on opening.
  auto model = LlamaModel::uninitialized(config, torch::kFloat32, device);
  for (auto& [name, t] : model.named_parameters()) {
    t.copy_(base_params.at(name));
    if (contains(reader.packed_names(), name)) {
      const auto packed = reader.packed(name);
      if (add_packed) {
        add_packed(packed, t);
        continue;
      }
      auto delta = torch::empty({packed.rows, packed.cols}, torch::kFloat32);
      unpack_matrix(packed, {delta.data_ptr<float>(), static_cast<std::size_t>(delta.numel())});
      t.add_(delta.to(device));
    } else if (contains(reader.low_rank_names(), name)) {
      // The product of the factors, taken where the model is (a GPU for a
      // swap rebuilt there).
      const auto low_rank = reader.low_rank(name);
      auto factor = [&](const PackedMatrix& p) {
        auto f = torch::empty({p.rows, p.cols}, torch::kFloat32);
        unpack_matrix(p, {f.data_ptr<float>(), static_cast<std::size_t>(f.numel())});
        return f.to(device);
      };
      t.add_(factor(low_rank.up).matmul(factor(low_rank.down)));
    } else if (contains(reader.dense_names(), name)) {
      const auto entry = reader.dense(name);
      const auto stored = dense_tensor(entry).to(device, torch::kFloat32);
      if (entry.kind == DenseKind::kFull)
        t.copy_(stored);
      else
        t.add_(stored);
    } else {
      throw InputError(reader.path().string() + ": no entry for tensor '" + name + "'");
    }
  }
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
