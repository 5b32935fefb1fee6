// dz-serve's engine: one resident base model, many fine-tuned variants, and
// a scheduler thread that batches requests of every variant together at
// iteration level (continuous batching): each step decodes one token for
// every running sequence and prefills prompt chunks within a token budget;
// sequences join and leave the batch at every step, each in its own KV-cache
// slot. Modes: delta (variants as packed deltas under an LRU, loaded
// asynchronously, SBMM per layer), swap (one reconstructed fine-tune
// resident at a time, the baseline DeltaZip compares against) and full
// (every variant resident as a full model: the upper bound).
// Torch-free header, built with libtorch; what a request is and how it is
// answered is deltazip/serve/request.h.
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
#include "deltazip/serve/request.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace fleet::deltazip {

enum class ServeMode { kDelta, kSwap, kFull };
/// "delta", "swap" or "full"; UsageError otherwise.
ServeMode parse_serve_mode(const std::string& text);
std::string serve_mode_name(ServeMode mode);

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
  /// limit; -1: the default, 4 on every device: on a GPU each variant is one
  /// more kernel launch per layer, on a CPU full mode streams each one's
  /// weights). Later requests for running variants go ahead of a request
  /// over the cap, max_batch of them at most.
  std::int64_t max_variants_per_batch = -1;
  std::string device = "cpu";
  /// Called on the loader thread before each delta is read (instrumentation
  /// and tests: a hook that waits shows loads do not hold up the batch).
  std::function<void(const std::string& variant)> before_delta_load;
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

  const text::Tokenizer& tokenizer() const;
  /// The base's chat template (tokenizer_config.json), or nullptr when it has none.
  const text::ModelChatTemplate* chat_template() const;
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
