// `dz-serve bench`: a load generator for a running server (Poisson
// arrivals, Zipf or uniform popularity over the variants), and what it
// measured. Needs no libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/stats.h"

namespace fleet::deltazip {

/// `dz-serve bench`: Poisson arrivals against a running server.
struct BenchCommand {
  std::string url = "http://127.0.0.1:8000";
  std::vector<std::string> variants;   ///< models to request (popularity rank = order given)
  double rate = 1.0;                   ///< requests per second
  double duration = 10.0;              ///< seconds of arrivals
  std::string popularity = "uniform";  ///< uniform or zipf:A
  std::filesystem::path prompts;       ///< one prompt per line (default: built-in sentences)
  std::int64_t max_tokens = 32;
  std::uint64_t seed = 0;
  double timeout = 300;               ///< seconds one request may take
  std::int64_t max_in_flight = 1024;  ///< requests outstanding before new arrivals count as errors
};

/// What `run_load` measured: every request's outcome summarised.
struct BenchResult {
  std::int64_t requests = 0, completed = 0, failed = 0, tokens = 0;
  double elapsed_s = 0;
  Summary ttft_s, latency_s;                   ///< over the completed requests
  std::map<std::string, std::int64_t> errors;  ///< failure message -> count

  double requests_per_s() const { return elapsed_s > 0 ? static_cast<double>(completed) / elapsed_s : 0.0; }
  double tokens_per_s() const { return elapsed_s > 0 ? static_cast<double>(tokens) / elapsed_s : 0.0; }
  /// The JSON report (docs/serving.md, "dz-serve bench"), with the command's settings.
  nlohmann::json to_json(const BenchCommand& command) const;
};
/// `dz-serve bench`: Poisson arrivals against a running server, each request
/// on its own thread, until every request has ended. UsageError for bad
/// settings, InputError when the server cannot be reached.
BenchResult run_load(const BenchCommand& command);

}  // namespace fleet::deltazip
