#include "dz-compress/eval_commands.h"

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

#include "model/torch/cpu_threads.h"

namespace fleet::model {
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
  auto tokenizer = text::Tokenizer::load(folder);
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
