#include "model/train_options.h"

#include <cmath>

#include "common/error.h"

namespace fleet::model {

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
  // The command line's ranges, for options read back from a checkpoint too:
  // products of them (tokens per step) must not overflow.
  auto at_most = [](const char* flag, double v, double cap) {
    if (!(v <= cap))
      throw UsageError(std::string(flag) + " must be at most " + std::to_string(static_cast<long long>(cap)));
  };
  positive("--steps", static_cast<double>(steps));
  positive("--batch-size", static_cast<double>(batch_size));
  positive("--grad-accumulation", static_cast<double>(grad_accumulation));
  positive("--lr", lr);
  at_most("--steps", static_cast<double>(steps), 1e9);
  at_most("--batch-size", static_cast<double>(batch_size), 65536);
  at_most("--grad-accumulation", static_cast<double>(grad_accumulation), 1e6);
  at_most("--seq-len", static_cast<double>(seq_len), 1e6);
  at_most("--warmup", static_cast<double>(warmup_steps), 1e9);
  at_most("--lr", lr, 10);
  at_most("the global batch", static_cast<double>(global_batch), 1e12);
  if (!(eps > 0 && eps <= 1)) throw UsageError("--adam-eps must be in (0, 1]");
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)) throw UsageError("the AdamW betas must be in [0, 1)");
  if (seq_len < 2) throw UsageError("--seq-len must be at least 2");
  if (warmup_steps < 0) throw UsageError("--warmup must be >= 0");
  if (min_lr_ratio < 0 || min_lr_ratio > 1) throw UsageError("--min-lr-ratio must be in [0, 1]");
  if (!(weight_decay >= 0 && weight_decay <= 10)) throw UsageError("--weight-decay must be in [0, 10]");
  if (!(clip_norm >= 0 && clip_norm <= 1e9)) throw UsageError("--clip-norm must be in [0, 1e9]");
  if (data_mode != "stream" && data_mode != "lines") throw UsageError("--data-mode must be stream or lines");
  if (!loss_after.empty() && data_mode != "lines") throw UsageError("--loss-after needs --data-mode lines");
  if (global_batch < 0) throw UsageError("the global batch must be positive");
}

nlohmann::json TrainOptions::to_json() const {
  return {{"steps", steps},
          {"batch_size", batch_size},
          {"seq_len", seq_len},
          {"grad_accumulation", grad_accumulation},
          {"lr", lr},
          {"min_lr_ratio", min_lr_ratio},
          {"warmup_steps", warmup_steps},
          {"weight_decay", weight_decay},
          {"beta1", beta1},
          {"beta2", beta2},
          {"eps", eps},
          {"clip_norm", clip_norm},
          {"seed", seed},
          {"data_mode", data_mode},
          {"loss_after", loss_after},
          {"global_batch", global_batch}};
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
  std::int64_t per_replica = -1;  // stays -1 (refused by validate) when the product overflows
  if (__builtin_mul_overflow(o.batch_size, o.grad_accumulation, &per_replica)) per_replica = -1;
  o.global_batch = v.get_or<std::int64_t>("global_batch", per_replica);
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

}  // namespace fleet::model
