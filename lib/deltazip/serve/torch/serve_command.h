// `dz-serve serve`: the server's entry point (its load generator is
// deltazip/serve/bench_client.h). Torch-free header, built with libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "deltazip/serve/torch/engine.h"
#include "deltazip/serve/torch/http_server.h"

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

/// "1073741824", "512M", "2G" -> bytes; UsageError otherwise.
std::uint64_t parse_byte_size(const std::string& text, const std::string& option);

}  // namespace fleet::deltazip
