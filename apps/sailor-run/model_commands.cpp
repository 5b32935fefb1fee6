#include "sailor-run/model_commands.h"

#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/output_check.h"
#include "model/synthetic_tasks.h"
#include "model/torch/compute_device.h"
#include "model/torch/evaluation.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "text/tokenizer.h"

namespace fleet::model {
namespace {

std::string tokenizer_config_json(const text::Tokenizer& tokenizer, const LlamaConfig& config) {
  nlohmann::ordered_json j = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                              {"model_max_length", config.max_position_embeddings},
                              {"clean_up_tokenization_spaces", false}};
  auto name = [&](std::int64_t id) { return tokenizer.token(static_cast<std::int32_t>(id)); };
  if (config.bos_token_id >= 0 && config.bos_token_id < tokenizer.vocab_size())
    j["bos_token"] = name(config.bos_token_id);
  if (config.eos_token_id >= 0 && config.eos_token_id < tokenizer.vocab_size())
    j["eos_token"] = name(config.eos_token_id);
  if (config.pad_token_id >= 0 && config.pad_token_id < tokenizer.vocab_size())
    j["pad_token"] = name(config.pad_token_id);
  return j.dump(2) + "\n";
}

}  // namespace

int run_init(const InitCommand& c) {
  if (c.preset.empty() == c.config.empty()) throw UsageError("give exactly one of --preset or --config");
  OutputCheck()
      .input(c.config, "--config")
      .input(c.tokenizer, "--tokenizer")
      .folder(c.output, "--output")
      .check(Existing::kNeedsForce, c.force);
  LlamaConfig config = c.preset.empty() ? load_llama_config(c.config) : llama_preset(c.preset);
  const auto dtype = parse_torch_dtype(c.dtype);
  config.torch_dtype = c.dtype;
  std::string tokenizer_json = c.tokenizer.empty() ? text::byte_tokenizer_json() : read_file(c.tokenizer);
  auto tokenizer =
      text::Tokenizer::parse(tokenizer_json, c.tokenizer.empty() ? "byte tokenizer" : c.tokenizer.string());
  if (tokenizer.vocab_size() > config.vocab_size)
    throw InputError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) + " tokens but vocab_size is " +
                     std::to_string(config.vocab_size));
  auto model = LlamaModel::random(config, c.seed);
  write_directory_atomically(c.output, [&](const std::filesystem::path& dir) {
    model.save(dir, dtype);
    write_file_atomically(dir / "tokenizer.json", tokenizer_json);
    write_file_atomically(dir / "tokenizer_config.json", tokenizer_config_json(tokenizer, config));
    nlohmann::ordered_json generation = {{"bos_token_id", config.bos_token_id}, {"eos_token_id", config.eos_token_id}};
    if (!config.more_eos_token_ids.empty()) generation["eos_token_id"] = config.eos_token_ids();
    if (config.pad_token_id >= 0) generation["pad_token_id"] = config.pad_token_id;
    write_file_atomically(dir / "generation_config.json", generation.dump(2) + "\n");
  });
  spdlog::info("wrote {} ({} parameters, {} layers, hidden {}, seed {})", c.output.string(), config.parameter_count(),
               config.num_hidden_layers, config.hidden_size, c.seed);
  return 0;
}

int run_make_corpus(const CorpusCommand& c) {
  auto task = parse_synthetic_task(c.task);
  OutputCheck().file(c.output, "--output").check(Existing::kReplace);
  write_file_atomically(c.output, make_synthetic_corpus(task, c.lines, c.seed));
  spdlog::info("wrote {} lines of '{}' to {}", c.lines, c.task, c.output.string());
  return 0;
}

}  // namespace fleet::model
