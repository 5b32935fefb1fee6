#include "model/torch/training_parts.h"

#include <cmath>
#include <random>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "common/utf8.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "text/tokenizer.h"

namespace fleet::model {
namespace {

// The generator of sequence `index` of step `step`.
std::mt19937_64 sequence_generator(const TrainOptions& o, std::int64_t step, std::int64_t index) {
  std::seed_seq seq{static_cast<std::uint32_t>(o.seed), static_cast<std::uint32_t>(o.seed >> 32),
                    static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32),
                    static_cast<std::uint32_t>(index)};
  return std::mt19937_64(seq);
}

// Lines mode: the line sequence `index` of `step` takes.
std::size_t line_of(const TrainingData& data, std::mt19937_64& rng) {
  return std::uniform_int_distribution<std::size_t>(0, data.lines.size() - 1)(rng);
}

// Targets of a line that carry loss: every token after the prompt (and after the first).
std::int64_t line_loss_tokens(const TrainingData& data, std::size_t line) {
  const auto size = static_cast<std::int64_t>(data.lines[line].size());
  return std::max<std::int64_t>(size - std::max<std::int64_t>(data.prompt_lengths[line], 1), 0);
}

}  // namespace

namespace {

// Training data is text: a binary file given by mistake (an archive, an
// executable, a disk image of zeros) would train without complaint on bytes.
// A NUL byte, or more than 1 % of the bytes outside well-formed UTF-8, is
// refused; a few stray bytes (a Latin-1 quote) are counted in a warning.
void check_is_text(std::string_view text, const std::filesystem::path& file) {
  const std::string name = is_stdio(file) ? std::string("standard input") : file.string();
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    throw InputError("holds a NUL byte at byte " + std::to_string(nul) + ": training data must be text",
                     {name, "", std::nullopt});
  std::size_t invalid = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t length = 1;
    if (utf8::decode(text, pos, length) == U'\uFFFD' && text.compare(pos, 3, "\xEF\xBF\xBD") != 0) ++invalid;
    pos += length;
  }
  if (invalid * 100 > text.size())
    throw InputError(std::to_string(invalid) + " of its " + std::to_string(text.size()) +
                         " bytes are not UTF-8: training data must be text",
                     {name, "", std::nullopt});
  if (invalid > 0) spdlog::warn("{}: {} byte(s) are not UTF-8; the tokenizer takes them as they are", name, invalid);
}

}  // namespace

TrainingData load_training_data(const std::vector<std::filesystem::path>& files, const text::Tokenizer& tokenizer,
                                const LlamaConfig& config, const TrainOptions& options) {
  if (files.empty()) throw UsageError("no training data: give at least one text file");
  TrainingData data;
  for (const auto& file : files) {
    std::string text = read_file(file);
    check_is_text(text, file);
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
      if (static_cast<std::int64_t>(ids.size()) > options.seq_len)
        ids.resize(static_cast<std::size_t>(options.seq_len));
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
    throw InputError("the training text has " + std::to_string(data.stream.size()) +
                     " tokens, fewer than one sequence (" + std::to_string(options.seq_len) + ")");
  if (options.data_mode == "lines" && data.lines.empty()) throw InputError("the training files hold no lines");
  return data;
}

Batch sample_sequences(const TrainingData& data, const TrainOptions& o, std::int64_t step, std::int64_t first,
                       std::int64_t n, std::int64_t pad_id) {
  const std::int64_t T = o.seq_len;
  auto tokens = torch::full({n, T}, std::max<std::int64_t>(pad_id, 0), torch::kInt64);
  auto mask = torch::zeros({n, T}, torch::kFloat32);
  auto* tok = tokens.data_ptr<std::int64_t>();
  auto* m = mask.data_ptr<float>();
  for (std::int64_t b = 0; b < n; ++b) {
    auto rng = sequence_generator(o, step, first + b);
    if (o.data_mode == "stream") {
      const auto limit = static_cast<std::int64_t>(data.stream.size()) - T;
      auto start = std::uniform_int_distribution<std::int64_t>(0, limit)(rng);
      std::copy(data.stream.begin() + start, data.stream.begin() + start + T, tok + b * T);
      std::fill(m + b * T + 1, m + (b + 1) * T, 1.0f);
    } else {
      const auto i = line_of(data, rng);
      const auto& line = data.lines[i];
      std::copy(line.begin(), line.end(), tok + b * T);
      for (auto t = std::max<std::int64_t>(data.prompt_lengths[i], 1); t < static_cast<std::int64_t>(line.size()); ++t)
        m[b * T + t] = 1.0f;
    }
  }
  return {tokens, mask};
}

std::int64_t loss_tokens(const TrainingData& data, const TrainOptions& o, std::int64_t step,
                         std::int64_t global_batch) {
  if (o.data_mode == "stream") return global_batch * (o.seq_len - 1);
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < global_batch; ++i) {
    auto rng = sequence_generator(o, step, i);
    total += line_loss_tokens(data, line_of(data, rng));
  }
  return total;
}

torch::Tensor batch_loss(const torch::Tensor& logits, const Batch& batch, double divisor) {
  auto losses = next_token_losses(logits, batch.tokens);
  auto weights = batch.mask.narrow(1, 1, batch.mask.size(1) - 1).reshape({-1}).to(losses.options());
  return (losses * weights).sum() / std::max(divisor, 1.0);
}

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& params, const TrainOptions& options)
    : options_(options) {
  for (const auto& [name, p] : params) {
    names_.push_back(name);
    params_.push_back(p);
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void AdamW::step(double lr, std::int64_t t) {
  torch::NoGradGuard no_grad;
  const auto& o = options_;
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    const auto& g = p.grad();
    if (p.dim() >= 2 && o.weight_decay > 0) p.mul_(1 - lr * o.weight_decay);
    exp_avg_[i].mul_(o.beta1).add_(g, 1 - o.beta1);
    exp_avg_sq_[i].mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    auto denom = (exp_avg_sq_[i] / bc2).sqrt_().add_(o.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    out.emplace_back("exp_avg." + names_[i], exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + names_[i], exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load(const std::filesystem::path& dir,
                 const std::function<torch::Tensor(const std::string&, const torch::Tensor&)>& slice) {
  const auto index = dir / "optimizer.safetensors.index.json";
  SafetensorsCheckpoint file(std::filesystem::exists(index) ? index : dir / "optimizer.safetensors");
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    for (auto [prefix, target] : {std::pair{"exp_avg.", &exp_avg_[i]}, std::pair{"exp_avg_sq.", &exp_avg_sq_[i]}}) {
      const std::string name = prefix + names_[i];
      if (!file.contains(name)) throw InputError(dir.string() + ": the optimizer state lacks '" + name + "'");
      auto t = to_torch(file.view(name));
      if (slice) t = slice(name, t);
      if (t.sizes() != target->sizes())
        throw InputError(dir.string() + ": optimizer state of '" + names_[i] + "' has the wrong shape");
      target->copy_(t);
    }
  }
}

double gradient_sum_of_squares(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (const auto& [name, p] : params)
    if (p.grad().defined()) total += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  return total;
}

void clip_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& params, double norm, double max_norm) {
  if (!(max_norm > 0) || norm <= max_norm) return;
  torch::NoGradGuard no_grad;
  const double scale = max_norm / (norm + 1e-6);
  for (const auto& [name, p] : params)
    if (p.grad().defined()) p.grad().mul_(scale);
}

}  // namespace fleet::model
