// dz-serve's HTTP front end (cpp-httplib): the OpenAI-compatible endpoints,
// /health, /metrics and the variant management endpoints over an Engine.
// The protocol is in docs/serving.md. Torch-free header.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "deltazip/serve/torch/engine.h"

namespace fleet::deltazip {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       ///< 0: any free port
  std::filesystem::path port_file;       ///< written with the bound port once listening
  std::size_t max_body_bytes = 1 << 20;  ///< larger bodies get 413
  int threads = 1024;                    ///< connections served at once (a stream holds one); threads start on demand
  /// Connections one client address may hold open at once (0: no limit);
  /// one more is answered 429 and closed.
  int max_connections_per_client = 256;
  /// Seconds a request's headers and body may take to arrive, from the
  /// connection's start or (keep-alive) the previous response plus the
  /// keep-alive wait; a connection past it is closed (0: only the per-read
  /// timeout).
  double request_timeout_s = 30;
  /// After SIGTERM or SIGINT: seconds in-flight requests may take before
  /// they are ended with an error; the process exits within about one
  /// second more. A second signal exits at once.
  double shutdown_timeout_s = 30;
  /// Non-empty: every endpoint but /health and /metrics needs the header
  /// `Authorization: Bearer <api_key>` (else 401).
  std::string api_key;
  /// POST /v1/load_delta and /v1/unload_delta answer 403 unless set.
  bool allow_runtime_loading = false;
  /// The folders runtime loads may read from (canonical paths): a path
  /// given to /v1/load_delta, absolute or relative to one of them, must
  /// resolve (links followed) to a regular file inside one.
  std::vector<std::filesystem::path> delta_roots;
};

/// Where a path given to /v1/load_delta resolves among `roots` (see
/// HttpOptions::delta_roots); ServeError 400 otherwise, whose message names
/// only the path as given, the same whether it is outside the roots,
/// missing, a folder or unreadable.
std::filesystem::path resolve_runtime_delta(const std::string& path, const std::vector<std::filesystem::path>& roots);

/// Serves until SIGTERM or SIGINT; then stops taking requests (503),
/// finishes those in flight within shutdown_timeout_s (ending the rest with
/// an error) and returns 0; a second signal exits the process at once with
/// 128 + the first signal. IoError when the address cannot be bound.
int serve_http(Engine& engine, const HttpOptions& options);

}  // namespace fleet::deltazip
