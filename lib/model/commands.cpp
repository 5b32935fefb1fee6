#include "model/commands.h"

#include <dlfcn.h>

#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/output_check.h"
#include "model/device.h"
#include "model/evaluation.h"
#include "model/llama.h"
#include "model/synthetic_tasks.h"
#include "model/tensor_bridge.h"
#include "model/tokenizer.h"

namespace fleet::model {
namespace {

std::string tokenizer_config_json(const Tokenizer& tokenizer, const LlamaConfig& config) {
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

void set_cpu_threads(int threads) {
  if (threads < 0) throw UsageError("--threads must be >= 0");
  if (threads == 0) return;
  torch::set_num_threads(threads);
  // Debian's libtorch hands matrix products to the system BLAS. OpenBLAS keeps
  // its own thread pool that torch::set_num_threads does not reach, so a
  // "one thread" run would still use every core (and sum in a core-count
  // dependent order). Its setter is found at run time: the BLAS behind
  // libblas.so.3 is chosen by the system, not at link time.
  using SetThreads = void (*)(int);
  std::vector<void*> scopes = {RTLD_DEFAULT};
  for (const char* library : {"libblas.so.3", "libopenblas.so.0"}) {  // when loaded without RTLD_GLOBAL
    if (void* handle = ::dlopen(library, RTLD_LAZY | RTLD_NOLOAD)) scopes.push_back(handle);
  }
  for (void* scope : scopes) {
    if (auto* set = reinterpret_cast<SetThreads>(::dlsym(scope, "openblas_set_num_threads"))) {
      set(threads);
      break;
    }
  }
  for (std::size_t i = 1; i < scopes.size(); ++i) ::dlclose(scopes[i]);  // drops the references NOLOAD took
}

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
  std::string tokenizer_json = c.tokenizer.empty() ? byte_tokenizer_json() : read_file(c.tokenizer);
  auto tokenizer = Tokenizer::parse(tokenizer_json, c.tokenizer.empty() ? "byte tokenizer" : c.tokenizer.string());
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

namespace {

std::vector<SyntheticTask> parse_tasks(const std::vector<std::string>& names) {
  std::vector<SyntheticTask> tasks;
  for (const auto& t : names) {
    tasks.push_back(parse_synthetic_task(t));
    if (tasks.back() == SyntheticTask::kBase) throw UsageError("the base language has no accuracy; use --text");
  }
  return tasks;
}

// Perplexity on the texts and accuracy on the tasks of one model folder, as JSON.
nlohmann::json measure(const std::filesystem::path& folder, torch::ScalarType dtype, torch::Device device,
                       const std::vector<std::filesystem::path>& text, const std::vector<SyntheticTask>& tasks,
                       std::size_t samples, std::uint64_t seed, std::int64_t window) {
  auto model = LlamaModel::load(folder, dtype, device);
  auto tokenizer = Tokenizer::load(folder);
  nlohmann::json out = {{"model", folder.string()}, {"tasks", nlohmann::json::array()}};
  if (!text.empty()) {
    std::vector<std::int64_t> ids;
    for (const auto& f : text) {
      auto encoded = tokenizer.encode(read_file(f), true);
      ids.insert(ids.end(), encoded.begin(), encoded.end());
    }
    auto r = evaluate_perplexity(model, ids, window);
    out["text"] = {{"tokens", r.tokens}, {"mean_nll", r.mean_nll}, {"perplexity", r.perplexity}};
  }
  for (auto task : tasks) {
    auto r = evaluate_task(model, tokenizer, task, samples, seed);
    out["tasks"].push_back({{"task", r.task}, {"correct", r.correct}, {"total", r.total}, {"accuracy", r.accuracy()}});
  }
  return out;
}

void check_files(const std::vector<std::filesystem::path>& files) {
  for (const auto& f : files) check_input_file(f);
}

}  // namespace

int run_eval(const EvalCommand& c) {
  set_cpu_threads(c.threads);
  if (c.text.empty() && c.tasks.empty()) throw UsageError("give --text FILE and/or --task NAME");
  auto tasks = parse_tasks(c.tasks);
  check_files(c.text);
  const auto device = resolve_device(c.device);
  const auto dtype = parse_torch_dtype(c.dtype.empty() ? default_compute_dtype(device) : c.dtype);
  auto out = measure(c.model, dtype, torch_device(device), c.text, tasks, c.samples, c.seed, c.window);
  if (c.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (out.contains("text"))
    std::cout << fmt::format("text: {} tokens, mean NLL {:.4f} nats/token, perplexity {:.3f}\n",
                             out["text"]["tokens"].get<std::int64_t>(), out["text"]["mean_nll"].get<double>(),
                             out["text"]["perplexity"].get<double>());
  for (const auto& t : out["tasks"])
    std::cout << fmt::format("{}: {}/{} exact ({:.1f}%)\n", t["task"].get<std::string>(),
                             t["correct"].get<std::size_t>(), t["total"].get<std::size_t>(),
                             100 * t["accuracy"].get<double>());
  return 0;
}

int run_compare(const CompareCommand& c) {
  set_cpu_threads(c.threads);
  if (c.text.empty() && c.tasks.empty()) throw UsageError("give --text FILE and/or --task NAME");
  auto tasks = parse_tasks(c.tasks);
  check_files(c.text);
  for (const auto& [label, folder] : c.models) load_llama_config(folder);  // every folder valid before any work
  const auto device = torch_device(resolve_device(c.device));
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [label, folder] : c.models) {
    auto row = measure(folder, torch::kFloat32, device, c.text, tasks, c.samples, c.seed, c.window);
    row["label"] = label;
    rows.push_back(row);
  }
  if (c.json) {
    std::cout << nlohmann::json{{"models", rows}}.dump(2) << "\n";
    return 0;
  }
  std::string header = fmt::format("{:<16}", "model");
  if (!c.text.empty()) header += fmt::format(" {:>12}", "perplexity");
  for (const auto& t : c.tasks) header += fmt::format(" {:>10}", t + " %");
  std::cout << header << "\n";
  for (const auto& row : rows) {
    std::string line = fmt::format("{:<16}", row["label"].get<std::string>());
    if (row.contains("text")) line += fmt::format(" {:>12.3f}", row["text"]["perplexity"].get<double>());
    for (const auto& t : row["tasks"]) line += fmt::format(" {:>10.1f}", 100 * t["accuracy"].get<double>());
    std::cout << line << "\n";
  }
  return 0;
}

}  // namespace fleet::model
