#include "deltazip/serve/torch/serve_command.h"

#include <algorithm>

#include "common/error.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "model/torch/cpu_threads.h"

namespace fleet::deltazip {

std::uint64_t parse_byte_size(const std::string& text, const std::string& option) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "KiB")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "MiB")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty())
    used = 0;
  if (used == 0 || !(value >= 0) || value * scale > 1e18)
    throw UsageError(option + " must be a byte count such as 1073741824, 512M or 2G, not '" + text + "'");
  return static_cast<std::uint64_t>(value * scale);
}

int run_serve(const ServeCommand& c) {
  model::set_cpu_threads(c.threads);
  EngineOptions options = c.engine;
  options.mode = parse_serve_mode(c.mode);
  options.delta_memory = parse_byte_size(c.delta_memory, "--delta-memory");
  std::vector<std::pair<std::string, std::filesystem::path>> variants;
  for (const auto& spec : c.deltas) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw UsageError("--delta expects NAME=FILE.h5, not '" + spec + "'");
    variants.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  }
  HttpOptions http = c.http;
  if (http.allow_runtime_loading && c.delta_dir.empty())
    throw UsageError("--allow-runtime-loading needs --delta-dir: the folder variants may be loaded from at run time");
  if (!c.delta_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(c.delta_dir, ec))
      throw InputError("--delta-dir " + c.delta_dir.string() + ": no such folder");
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(c.delta_dir))
      if (entry.path().extension() == ".h5") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    // An empty folder is a start for a server that loads its variants later.
    if (files.empty() && !http.allow_runtime_loading)
      throw InputError("--delta-dir " + c.delta_dir.string() + " holds no .h5 file");
    for (const auto& f : files) variants.emplace_back(f.stem().string(), f);
    http.delta_roots = {std::filesystem::canonical(c.delta_dir)};
  }
  for (const auto& [name, path] : variants) check_input_file(path);
  Engine engine(options);
  for (const auto& [name, path] : variants) {
    try {
      engine.add_variant(name, path);
    } catch (const ServeError& e) {
      throw InputError("--delta " + name + ": " + e.what());
    }
  }
  if (variants.empty())
    spdlog::warn("no --delta or --delta-dir: serving the base model only (add variants with POST /v1/load_delta)");
  if (http.api_key.empty() && http.host != "127.0.0.1" && http.host != "localhost" && http.host != "::1")
    spdlog::warn("listening on {} without --api-key: anyone who can reach the port can use the server", http.host);
  return serve_http(engine, http);
}

}  // namespace fleet::deltazip
