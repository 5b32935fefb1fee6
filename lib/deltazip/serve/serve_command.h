// Entry points of dz-serve's subcommands: the server and the load generator.
// Torch-free header: the program includes it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "deltazip/serve/engine.h"
#include "deltazip/serve/http_server.h"

namespace fleet::deltazip {

/// `dz-serve serve`.
struct ServeCommand {
  EngineOptions engine;
  HttpOptions http;
  std::string mode = "delta";
  std::vector<std::string> deltas;  ///< NAME=FILE.h5
  std::filesystem::path delta_dir;  ///< every *.h5 inside, named by its stem
  std::string delta_memory = "0";   ///< bytes, with an optional K/M/G/T suffix (powers of 1024)
  int threads = 0;
};
int run_serve(const ServeCommand& command);

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
  bool json = false;
};
int run_bench(const BenchCommand& command);

/// "1073741824", "512M", "2G" -> bytes; UsageError otherwise.
std::uint64_t parse_byte_size(const std::string& text, const std::string& option);

}  // namespace fleet::deltazip
