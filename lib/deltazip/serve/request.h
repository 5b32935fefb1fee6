// A completion request as dz-serve's engine takes it (token ids in, token
// ids and log-probabilities out), the stream a client reads its answer
// from, the error a client is told about, and what a served model is.
// Needs no libtorch: the OpenAI layer builds requests and reads streams.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/sampler.h"

namespace fleet::deltazip {

/// An error a client caused or must be told about, with its HTTP status and
/// OpenAI error type ("invalid_request_error", "not_found_error", ...).
class ServeError : public std::runtime_error {
 public:
  ServeError(int status, std::string type, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  /// OpenAI's string code (context_length_exceeded, model_not_found), or "".
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};

/// One completion as the engine sees it (token ids in, token ids out).
struct GenerationRequest {
  std::string model;
  std::vector<std::int64_t> prompt;
  std::int64_t max_tokens = 16;
  model::SamplingOptions sampling;
  /// -1: none; else each generated token's log-probability and those of
  /// this many most likely tokens (0 to kMaxTopLogprobs).
  std::int64_t logprobs = -1;
  /// Also the log-probability of each prompt token after the ones before it
  /// (needs logprobs >= 0; what `echo` with `logprobs` returns).
  bool prompt_logprobs = false;
};

/// The most alternatives a request may ask log-probabilities for (vLLM's default).
inline constexpr std::int64_t kMaxTopLogprobs = 20;

/// What a client holds while its request runs.
class RequestStream {
 public:
  struct Update {
    std::vector<std::int64_t> tokens;            ///< new since the last update
    std::vector<model::TokenLogprobs> logprobs;  ///< one per token when the request asked for them
    /// Prompt tokens from the second on, in order, as the prefill reaches them.
    std::vector<model::TokenLogprobs> prompt_logprobs;
    bool finished = false;
    std::string finish_reason;  ///< "stop" (end of sequence), "length" or "cancelled"
    std::string error;          ///< set when the engine failed the request
    /// With an error: the HTTP status, OpenAI error type and code it maps to.
    int error_status = 500;
    std::string error_type = "server_error", error_code;
  };
  virtual ~RequestStream() = default;
  /// Waits up to `timeout` for new tokens or the end.
  virtual Update wait(std::chrono::milliseconds timeout) = 0;
  /// Ends the request at the next step and frees its slot (client gone or stop string seen).
  virtual void cancel() = 0;
  virtual std::int64_t prompt_tokens() const = 0;
};

struct ModelInfo {
  std::string name;
  bool is_base = false;
  std::string path;
  std::string state;  ///< resident, cold, loading, failed
};

}  // namespace fleet::deltazip
