// dz-serve's HTTP front end (cpp-httplib): the OpenAI-compatible endpoints,
// /health, /metrics and the variant management endpoints over an Engine.
// The protocol is in docs/serving.md. Torch-free header.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "deltazip/serve/engine.h"

namespace fleet::deltazip {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                         ///< 0: any free port
  std::filesystem::path port_file;         ///< written with the bound port once listening
  std::size_t max_body_bytes = 1 << 20;    ///< larger bodies get 413
  int threads = 128;                       ///< connections served at once (a stream holds one)
};

/// Serves until SIGTERM or SIGINT; then stops taking requests (503),
/// finishes those in flight and returns 0. IoError when the address cannot
/// be bound.
int serve_http(Engine& engine, const HttpOptions& options);

}  // namespace fleet::deltazip
