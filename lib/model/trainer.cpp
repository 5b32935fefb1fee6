#include "model/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <random>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/output_check.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "model/device.h"
#include "model/llama.h"
#include "model/tensor_bridge.h"
#include "model/tokenizer.h"
#include "model/torch_compat.h"

namespace fleet::model {
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFormat = "gpufleet-trainer-state";
constexpr int kStateVersion = 1;

// The token data of a run, in the form its data mode samples from.
struct TrainingData {
  std::vector<std::int64_t> stream;                  // stream mode
  std::vector<std::vector<std::int64_t>> lines;      // lines mode
  std::vector<std::int64_t> prompt_lengths;          // lines mode: tokens not trained on
  std::uint64_t fingerprint = 1469598103934665603ull;  // FNV-1a over every token

  void hash(std::uint64_t value) {
    fingerprint ^= value;
    fingerprint *= 1099511628211ull;
  }
};

TrainingData load_data(const std::vector<std::filesystem::path>& files, const Tokenizer& tokenizer,
                       const LlamaConfig& config, const TrainOptions& options) {
  if (files.empty()) throw UsageError("no training data: give at least one text file");
  TrainingData data;
  for (const auto& file : files) {
    std::string text = read_file(file);
    if (options.data_mode == "stream") {
      auto ids = tokenizer.encode(text, false);
      data.stream.push_back(config.bos_token_id);
      data.stream.insert(data.stream.end(), ids.begin(), ids.end());
      data.stream.push_back(config.eos_token_id);
      continue;
    }
    std::size_t begin = 0;
    while (begin < text.size()) {
      std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + begin, end - begin);
      begin = end + 1;
      if (line.empty()) continue;
      std::vector<std::int64_t> ids{config.bos_token_id};
      std::int64_t prompt = 1;
      std::string_view rest = line;
      if (!options.loss_after.empty()) {
        auto at = line.find(options.loss_after);
        if (at != std::string_view::npos) {
          auto head = tokenizer.encode(line.substr(0, at + options.loss_after.size()), false);
          ids.insert(ids.end(), head.begin(), head.end());
          prompt = static_cast<std::int64_t>(ids.size());
          rest = line.substr(at + options.loss_after.size());
        }
      }
      auto tail = tokenizer.encode(rest, false);
      ids.insert(ids.end(), tail.begin(), tail.end());
      ids.push_back(config.eos_token_id);
      if (static_cast<std::int64_t>(ids.size()) > options.seq_len) ids.resize(static_cast<std::size_t>(options.seq_len));
      data.lines.push_back(std::move(ids));
      data.prompt_lengths.push_back(prompt);
    }
  }
  auto check = [&](std::int64_t t) {
    if (t < 0 || t >= config.vocab_size)
      throw InputError("the tokenizer produced id " + std::to_string(t) + ", beyond the model's vocabulary");
    data.hash(static_cast<std::uint64_t>(t));
  };
  for (auto t : data.stream) check(t);
  for (std::size_t i = 0; i < data.lines.size(); ++i) {
    for (auto t : data.lines[i]) check(t);
    data.hash(static_cast<std::uint64_t>(data.prompt_lengths[i]));
  }
  if (options.data_mode == "stream" && static_cast<std::int64_t>(data.stream.size()) < options.seq_len + 1)
    throw InputError("the training text has " + std::to_string(data.stream.size()) + " tokens, fewer than one sequence (" +
                     std::to_string(options.seq_len) + ")");
  if (options.data_mode == "lines" && data.lines.empty()) throw InputError("the training files hold no lines");
  return data;
}

struct Batch {
  torch::Tensor tokens, mask;
};

// The micro-batch for (step, micro): a function of the seed alone, so a
// resumed run sees exactly the batches the uninterrupted run would.
Batch sample_batch(const TrainingData& data, const TrainOptions& o, std::int64_t step, std::int64_t micro,
                   std::int64_t pad_id) {
  std::seed_seq seq{static_cast<std::uint32_t>(o.seed), static_cast<std::uint32_t>(o.seed >> 32),
                    static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(micro)};
  std::mt19937_64 rng(seq);
  const std::int64_t B = o.batch_size, T = o.seq_len;
  auto tokens = torch::full({B, T}, std::max<std::int64_t>(pad_id, 0), torch::kInt64);
  auto mask = torch::zeros({B, T}, torch::kFloat32);
  auto* tok = tokens.data_ptr<std::int64_t>();
  auto* m = mask.data_ptr<float>();
  for (std::int64_t b = 0; b < B; ++b) {
    if (o.data_mode == "stream") {
      const auto limit = static_cast<std::int64_t>(data.stream.size()) - T;
      auto start = std::uniform_int_distribution<std::int64_t>(0, limit)(rng);
      std::copy(data.stream.begin() + start, data.stream.begin() + start + T, tok + b * T);
      std::fill(m + b * T + 1, m + (b + 1) * T, 1.0f);
    } else {
      auto i = std::uniform_int_distribution<std::size_t>(0, data.lines.size() - 1)(rng);
      const auto& line = data.lines[i];
      std::copy(line.begin(), line.end(), tok + b * T);
      for (auto t = std::max<std::int64_t>(data.prompt_lengths[i], 1); t < static_cast<std::int64_t>(line.size()); ++t)
        m[b * T + t] = 1.0f;
    }
  }
  return {tokens, mask};
}

// AdamW with decoupled weight decay; moments in float32 like the parameters.
class AdamW {
 public:
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainOptions& o) : o_(o) {
    for (const auto& [name, p] : params) {
      names_.push_back(name);
      params_.push_back(p);
      exp_avg_.push_back(torch::zeros_like(p));
      exp_avg_sq_.push_back(torch::zeros_like(p));
    }
  }
  void step(double lr, std::int64_t t) {
    torch::NoGradGuard no_grad;
    const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(t));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (!p.grad().defined()) continue;
      const auto& g = p.grad();
      if (p.dim() >= 2 && o_.weight_decay > 0) p.mul_(1 - lr * o_.weight_decay);
      exp_avg_[i].mul_(o_.beta1).add_(g, 1 - o_.beta1);
      exp_avg_sq_[i].mul_(o_.beta2).addcmul_(g, g, 1 - o_.beta2);
      auto denom = (exp_avg_sq_[i] / bc2).sqrt_().add_(o_.eps);
      p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
    }
  }
  void save(const std::filesystem::path& path) const {
    SafetensorsWriter writer;
    for (std::size_t i = 0; i < names_.size(); ++i) {
      add_to_writer(writer, "exp_avg." + names_[i], exp_avg_[i]);
      add_to_writer(writer, "exp_avg_sq." + names_[i], exp_avg_sq_[i]);
    }
    writer.write(path);
  }
  void load(const std::filesystem::path& path) {
    SafetensorsFile file(path);
    for (std::size_t i = 0; i < names_.size(); ++i) {
      for (auto [prefix, target] : {std::pair{"exp_avg.", &exp_avg_[i]}, std::pair{"exp_avg_sq.", &exp_avg_sq_[i]}}) {
        auto t = to_torch(file.view(prefix + names_[i]));
        if (t.sizes() != target->sizes()) throw InputError(path.string() + ": optimizer state of '" + names_[i] + "' has the wrong shape");
        target->copy_(t);
      }
    }
  }

 private:
  TrainOptions o_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_, exp_avg_, exp_avg_sq_;
};

double clip_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (const auto& [name, p] : params)
    if (p.grad().defined()) total += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  double norm = std::sqrt(total);
  if (max_norm > 0 && norm > max_norm) {
    double scale = max_norm / (norm + 1e-6);
    for (const auto& [name, p] : params)
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

}  // namespace

void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to) {
  for (const auto& name : tokenizer_file_names()) {
    if (std::filesystem::exists(from / name))
      std::filesystem::copy_file(from / name, to / name, std::filesystem::copy_options::overwrite_existing);
  }
}

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                              "tokenizer.model", "generation_config.json"};
  return names;
}

void TrainOptions::validate() const {
  auto positive = [](const char* flag, double v) {
    if (!(v > 0)) throw UsageError(std::string(flag) + " must be positive");
  };
  positive("--steps", static_cast<double>(steps));
  positive("--batch-size", static_cast<double>(batch_size));
  positive("--grad-accumulation", static_cast<double>(grad_accumulation));
  positive("--lr", lr);
  if (seq_len < 2) throw UsageError("--seq-len must be at least 2");
  if (warmup_steps < 0) throw UsageError("--warmup must be >= 0");
  if (min_lr_ratio < 0 || min_lr_ratio > 1) throw UsageError("--min-lr-ratio must be in [0, 1]");
  if (weight_decay < 0) throw UsageError("--weight-decay must be >= 0");
  if (clip_norm < 0) throw UsageError("--clip-norm must be >= 0");
  if (data_mode != "stream" && data_mode != "lines") throw UsageError("--data-mode must be stream or lines");
  if (!loss_after.empty() && data_mode != "lines") throw UsageError("--loss-after needs --data-mode lines");
}

nlohmann::json TrainOptions::to_json() const {
  return {{"steps", steps}, {"batch_size", batch_size}, {"seq_len", seq_len}, {"grad_accumulation", grad_accumulation},
          {"lr", lr}, {"min_lr_ratio", min_lr_ratio}, {"warmup_steps", warmup_steps}, {"weight_decay", weight_decay},
          {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"clip_norm", clip_norm}, {"seed", seed},
          {"data_mode", data_mode}, {"loss_after", loss_after}};
}

TrainOptions TrainOptions::from_json(const JsonValue& v) {
  TrainOptions o;
  o.steps = v.get<std::int64_t>("steps");
  o.batch_size = v.get<std::int64_t>("batch_size");
  o.seq_len = v.get<std::int64_t>("seq_len");
  o.grad_accumulation = v.get<std::int64_t>("grad_accumulation");
  o.lr = v.get<double>("lr");
  o.min_lr_ratio = v.get<double>("min_lr_ratio");
  o.warmup_steps = v.get<std::int64_t>("warmup_steps");
  o.weight_decay = v.get<double>("weight_decay");
  o.beta1 = v.get<double>("beta1");
  o.beta2 = v.get<double>("beta2");
  o.eps = v.get<double>("eps");
  o.clip_norm = v.get<double>("clip_norm");
  o.seed = v.get<std::uint64_t>("seed");
  o.data_mode = v.get<std::string>("data_mode");
  o.loss_after = v.get<std::string>("loss_after");
  o.validate();
  return o;
}

double learning_rate(const TrainOptions& o, std::int64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double span = static_cast<double>(std::max<std::int64_t>(o.steps - o.warmup_steps, 1));
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / span);
  const double cosine = 0.5 * (1 + std::cos(M_PI * progress));
  return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * cosine);
}

TrainResult train(const TrainJob& job) {
  namespace fs = std::filesystem;
  TrainOptions options = job.options;
  std::vector<fs::path> data_files = job.data;
  std::int64_t start_step = 0;
  fs::path source = job.model;
  nlohmann::json history = nlohmann::json::array();
  std::uint64_t expected_fingerprint = 0;
  if (job.resume) {
    auto state_doc = load_json_file(job.output / kStateFile);
    auto state = state_doc.root();
    if (state.get<std::string>("format") != kStateFormat) state.at("format").fail("not a trainer state");
    if (state.get<int>("version") != kStateVersion) state.at("version").fail("unsupported version");
    options = TrainOptions::from_json(state.at("options"));
    start_step = state.get<std::int64_t>("step");
    data_files.clear();
    for (const auto& f : state.get<std::vector<std::string>>("data")) data_files.emplace_back(f);
    expected_fingerprint = state.get<std::uint64_t>("data_fingerprint");
    history = state.at("history").raw();
    source = job.output;
  } else {
    options.validate();
    if (fs::exists(job.output / kStateFile) && !job.force)
      throw UsageError(job.output.string() + " already holds a training run; use --resume, --force or another output folder");
    OutputCheck check;
    check.input(job.model, "--model");
    for (const auto& f : data_files) check.input(f, "--data");
    check.folder(job.output, "--output").check(Existing::kNeedsForce, job.force);
  }

  // Inputs are checked before any work starts.
  for (const auto& f : data_files) check_input_file(f);
  const auto device = resolve_device(job.device);
  auto model = LlamaModel::load(source, torch::kFloat32, torch_device(device));
  auto tokenizer = Tokenizer::load(source);
  if (tokenizer.vocab_size() > model.config().vocab_size)
    throw InputError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                     " tokens, more than the model's vocab_size " + std::to_string(model.config().vocab_size));
  auto data = load_data(data_files, tokenizer, model.config(), options);
  if (job.resume && data.fingerprint != expected_fingerprint)
    throw InputError("the training data changed since the checkpoint in " + job.output.string() +
                     " (token fingerprint differs); resume needs the same files");
  model.set_requires_grad(true);
  auto params = model.named_parameters();
  AdamW optimizer(params, options);
  if (job.resume) optimizer.load(job.output / kOptimizerFile);

  std::int64_t end_step = options.steps;
  if (job.stop_after > 0) end_step = std::min(end_step, start_step + job.stop_after);
  auto save_checkpoint = [&](std::int64_t step_done) {
    write_directory_atomically(job.output, [&](const fs::path& dir) {
      model.save(dir, torch::kFloat32);
      optimizer.save(dir / kOptimizerFile);
      copy_tokenizer_files(source, dir);
      std::vector<std::string> names;
      // "-" stays "-": a resumed run reads standard input again (the fingerprint checks it is the same text).
      for (const auto& f : data_files) names.push_back(is_stdio(f) ? f.string() : fs::absolute(f).string());
      nlohmann::json state = {{"format", kStateFormat}, {"version", kStateVersion}, {"step", step_done},
                              {"options", options.to_json()}, {"data", names},
                              {"data_fingerprint", data.fingerprint}, {"history", history}};
      write_file_atomically(dir / kStateFile, state.dump(2) + "\n");
    });
  };

  TrainResult result;
  result.first_step = start_step;
  Progress progress("train", static_cast<std::uint64_t>(end_step - start_step), "steps");
  const auto started = std::chrono::steady_clock::now();
  const std::int64_t pad = model.config().pad_token_id;
  // Weights, gradients and optimizer state stay float32; on a GPU the matrix
  // products run in bfloat16 under autocast (mixed precision).
  std::optional<compat::CudaAutocast> autocast;
  if (device == ComputeDevice::kCuda) autocast.emplace(torch::kBFloat16);
  const auto on_device = torch_device(device);
  for (std::int64_t step = start_step; step < end_step; ++step) {
    double loss_sum = 0;
    for (std::int64_t micro = 0; micro < options.grad_accumulation; ++micro) {
      auto batch = sample_batch(data, options, step, micro, pad);
      const auto tokens = batch.tokens.to(on_device), mask = batch.mask.to(on_device);
      auto loss = causal_lm_loss(model.forward(tokens).to(torch::kFloat32), tokens, mask) /
                  static_cast<double>(options.grad_accumulation);
      loss.backward();
      loss_sum += loss.item<double>();
    }
    if (!std::isfinite(loss_sum)) throw RuntimeFailure("the loss became " + std::to_string(loss_sum) + " at step " + std::to_string(step) + "; lower --lr");
    double grad_norm = clip_gradients(params, options.clip_norm);
    double lr = learning_rate(options, step);
    optimizer.step(lr, step + 1);
    for (auto& [name, p] : params) p.mutable_grad() = torch::Tensor();
    result.losses.push_back(loss_sum);
    history.push_back({{"step", step + 1}, {"loss", loss_sum}, {"lr", lr}, {"grad_norm", grad_norm}});
    if (job.log_every > 0 && ((step + 1) % job.log_every == 0 || step + 1 == end_step))
      spdlog::info("step {}/{}: loss {:.4f}, lr {:.3g}, grad norm {:.3g}", step + 1, options.steps, loss_sum, lr, grad_norm);
    progress.advance();
    if (job.checkpoint_every > 0 && (step + 1) % job.checkpoint_every == 0 && step + 1 < end_step) save_checkpoint(step + 1);
  }
  progress.finish();
  save_checkpoint(end_step);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.last_step = end_step;
  if (!result.losses.empty()) {
    result.first_loss = result.losses.front();
    result.last_loss = result.losses.back();
  }
  const double tokens = static_cast<double>((end_step - start_step) * options.batch_size * options.seq_len *
                                            options.grad_accumulation);
  result.tokens_per_second = seconds > 0 ? tokens / seconds : 0;
  return result;
}

}  // namespace fleet::model
