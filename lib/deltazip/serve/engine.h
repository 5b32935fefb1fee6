// dz-serve's engine: one resident base model, many fine-tuned variants, and
// a scheduler thread that batches requests of every variant together at
// iteration level (continuous batching): each step decodes one token for
// every running sequence and prefills prompt chunks within a token budget;
// sequences join and leave the batch at every step, each in its own KV-cache
// slot. Modes: delta (variants as packed deltas under an LRU, loaded
// asynchronously, SBMM per layer), swap (one reconstructed fine-tune
// resident at a time, the baseline DeltaZip compares against) and full
// (every variant resident as a full model: the upper bound).
// Torch-free header: the HTTP layer and the programs include it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/prometheus.h"
#include "model/chat_template.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

namespace fleet::deltazip {

enum class ServeMode { kDelta, kSwap, kFull };
/// "delta", "swap" or "full"; UsageError otherwise.
ServeMode parse_serve_mode(const std::string& text);
std::string serve_mode_name(ServeMode mode);

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

struct EngineOptions {
  std::filesystem::path base;  ///< Hugging Face model folder
  std::string base_name;       ///< model name of the base (default: the folder's name)
  ServeMode mode = ServeMode::kDelta;
  std::int64_t max_batch = 32;             ///< sequences running at once (KV-cache slots)
  std::int64_t max_tokens_per_step = 256;  ///< tokens one step computes: decodes + prompt chunks
  std::int64_t max_context = 0;            ///< tokens per sequence (0: the model's limit, at most 4096)
  std::uint64_t delta_memory = 0;          ///< bytes of resident deltas (0: no limit)
  std::int64_t max_queue = 1024;           ///< waiting requests before 429
  /// Distinct variants running at once in delta and full modes (0: no
  /// limit; -1: what the device favours: no limit on the CPU, where each
  /// variant's product costs about what its rows would cost in a later step,
  /// 4 on a GPU, where each is one more kernel launch per layer).
  std::int64_t max_variants_per_batch = -1;
  std::string device = "cpu";
  /// Called on the loader thread before each delta is read (instrumentation
  /// and tests: a hook that waits shows loads do not hold up the batch).
  std::function<void(const std::string& variant)> before_delta_load;
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

class Engine {
 public:
  /// Loads the base model and its tokenizer, starts the scheduler.
  explicit Engine(EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Registers a variant: the container is opened, its base identity and
  /// architecture checked (ServeError 400 with the reason otherwise). Full
  /// mode reconstructs it now; delta and swap modes load it when needed.
  void add_variant(const std::string& name, const std::filesystem::path& delta);
  /// Forgets a variant (404 when unknown); running requests for it finish first.
  void remove_variant(const std::string& name);
  std::vector<ModelInfo> models() const;

  /// Queues a request. ServeError: 404 unknown model, 413 prompt longer than
  /// the context, 400 prompt + max_tokens beyond it, 429 queue full, 503
  /// shutting down.
  std::shared_ptr<RequestStream> submit(GenerationRequest request);

  const model::Tokenizer& tokenizer() const;
  /// The base's chat template (tokenizer_config.json), or nullptr when it has none.
  const model::ModelChatTemplate* chat_template() const;
  const std::string& base_name() const;
  std::int64_t max_context() const;
  std::int64_t eos_token_id() const;
  /// Every id that ends a sequence: config.json's end-of-sequence ids, those
  /// of generation_config.json, and the chat template's eos_token.
  const std::vector<std::int64_t>& end_of_sequence_ids() const;
  std::int64_t bos_token_id() const;

  /// Prometheus text of every metric.
  std::string metrics_text() const;
  MetricsRegistry& metrics();

  /// Stops taking requests (503); those queued or running go on.
  void begin_shutdown();
  /// Ends every queued and running request with `message` as its error (a
  /// step under way finishes first): the shutdown deadline.
  void abort_all(const std::string& message);
  /// True when nothing is queued or running.
  bool idle() const;
  /// True once begin_shutdown() ran: new requests are refused with 503.
  bool shutting_down() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fleet::deltazip
