#include "sailor-plan/commands.h"

#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"
#include "common/output_check.h"
#include "sailor/calibration.h"
#include "sailor/import_sailor.h"
#include "sailor/model_from_config.h"

namespace fleet::sailor {
namespace {

std::pair<std::string, double> split_assignment(const std::string& text, const char* what) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError(std::string(what) + " must look like NAME=VALUE, got '" + text + "'");
  try {
    return {text.substr(0, eq), std::stod(text.substr(eq + 1))};
  } catch (const std::exception&) {
    throw UsageError(std::string(what) + ": '" + text.substr(eq + 1) + "' is not a number");
  }
}

}  // namespace

int run_import_hf(const ImportHfCommand& c) {
  auto file = !is_stdio(c.config) && std::filesystem::is_directory(c.config) ? c.config / "config.json" : c.config;
  OutputCheck check;
  check.input(file, "config").file(c.output, "--output").check(Existing::kReplace);
  if (c.sequence_length <= 0) throw UsageError("--seq-len must be positive");
  auto doc = load_json_file(file);
  std::string name = !c.name.empty()  ? c.name
                     : is_stdio(file) ? std::string("model")
                                      : std::filesystem::absolute(file).parent_path().filename().string();
  auto model =
      model_spec_from_hf_config(doc.root(), c.sequence_length, default_calibration().activation_bytes_per_float, name);
  write_json_file(c.output, to_json(model));
  double params = 0;
  for (const auto& layer : model.layers) params += layer.params.at(1);
  spdlog::info("wrote {}: {} layers, {:.1f} M parameters, sequence length {}", c.output.string(), model.layers.size(),
               params / 1e6, c.sequence_length);
  return 0;
}

int run_import(const ImportCommand& c) {
  ImportOptions opt;
  opt.source = c.source;
  opt.model = c.model;
  opt.global_batch = c.global_batch;
  opt.sequence_length = c.sequence_length;
  for (const std::string& p : c.prices) {
    const auto [gpu, usd] = split_assignment(p, "--price");
    if (!(usd >= 0 && usd <= 1e6)) throw UsageError("--price " + gpu + ": must be between 0 and 1000000 $/hour");
    opt.prices[gpu] = usd;
  }
  for (const std::string& q : c.quotas) {
    const auto [key, n] = split_assignment(q, "--quota");
    const auto at = key.find('@');
    if (at == std::string::npos) throw UsageError("--quota must look like GPU@ZONE=N, got '" + q + "'");
    if (!(n >= 0 && n <= 1e6) || n != static_cast<double>(static_cast<int>(n))) {
      throw UsageError("--quota " + key + ": the GPU count must be a whole number between 0 and 1000000");
    }
    opt.extra_quotas[key.substr(0, at)][key.substr(at + 1)] = static_cast<int>(n);
  }
  // The four files go into the output folder, which is made when missing.
  std::error_code ec;
  const bool folder_exists = std::filesystem::is_directory(c.output_dir, ec);
  OutputCheck check;
  check.input(c.source, "source");
  if (folder_exists) {
    for (const char* f : {"model.json", "profile.json", "cluster.json", "job.json"})
      check.file(c.output_dir / f, "--output");
  } else {
    check.folder(c.output_dir, "--output");
  }
  check.check(Existing::kReplace);
  const ImportedInputs in = import_sailor(opt);
  if (!folder_exists && !std::filesystem::create_directory(c.output_dir, ec)) {
    throw IoError("cannot create folder: " + ec.message(), {c.output_dir.string(), "", std::nullopt});
  }
  auto text = [](const nlohmann::json& j) { return j.dump(2) + "\n"; };
  write_files_atomically({{c.output_dir / "model.json", text(to_json(in.model))},
                          {c.output_dir / "profile.json", text(to_json(in.profiles))},
                          {c.output_dir / "cluster.json", text(to_json(in.cluster))},
                          {c.output_dir / "job.json", text(to_json(in.job))}});
  int gpus = 0;
  for (const auto& [gpu, zones] : in.cluster.quotas) {
    for (const auto& [zone, n] : zones) gpus += n;
  }
  spdlog::info("imported {} ({} layers, profiles for {} GPU types), a cluster of {} GPUs in {} zones into {}",
               in.model.name, in.model.layers.size(), in.profiles.gpus.size(), gpus, in.cluster.zone_region.size(),
               c.output_dir.string());
  return 0;
}

}  // namespace fleet::sailor
