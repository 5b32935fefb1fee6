#include "deltazip/serve/torch/engine.h"

#include <algorithm>
#include <ctime>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <thread>

#include <torch/torch.h>

#include "common/elapsed.h"
#include "common/error.h"
#include "common/logging.h"
#include "deltazip/container.h"
#include "deltazip/serve/torch/device_reconstruct.h"
#include "deltazip/serve/torch/variant_delta.h"
#include "deltazip/torch/reconstruct.h"
#include "fleet/config.h"
#include "model/model_folder.h"
#include "model/torch/compute_device.h"
#include "model/torch/llama.h"

namespace fleet::deltazip {
namespace {

using Clock = std::chrono::steady_clock;
using model::LlamaModel;

std::uint64_t model_bytes(const LlamaModel& m) {
  std::uint64_t total = 0;
  for (const auto& [name, t] : m.named_parameters()) total += static_cast<std::uint64_t>(t.nbytes());
  return total;
}

// A registered fine-tune. Guarded by the engine's mutex.
struct Variant {
  std::string name;
  std::filesystem::path path;
  std::shared_ptr<const VariantDelta> delta;  ///< delta mode, when resident
  std::shared_ptr<const LlamaModel> full;     ///< full mode: the reconstructed model
  bool loading = false;
  std::string failed;       ///< why loading failed
  std::int64_t active = 0;  ///< running sequences using it
  Clock::time_point last_used;
};

// One request inside the engine: the client's view (RequestStream) and the
// scheduler's state.
class Sequence final : public RequestStream {
 public:
  Sequence(GenerationRequest r, std::function<void()> wake)
      : request(std::move(r)), sampler(request.sampling, 0), arrived(Clock::now()), wake_(std::move(wake)) {}

  Update wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || finished_; });
    Update u;
    u.tokens.swap(pending_);
    u.logprobs.swap(pending_logprobs_);
    u.prompt_logprobs.swap(pending_prompt_logprobs_);
    u.finished = finished_;
    u.finish_reason = reason_;
    u.error = error_;
    u.error_status = error_status_;
    u.error_type = error_type_;
    u.error_code = error_code_;
    return u;
  }
  void cancel() override {
    cancelled = true;
    wake_();
  }
  std::int64_t prompt_tokens() const override { return static_cast<std::int64_t>(request.prompt.size()); }

  void emit(std::int64_t token, std::optional<model::TokenLogprobs> logprobs) {
    std::lock_guard lock(mutex_);
    pending_.push_back(token);
    if (logprobs) pending_logprobs_.push_back(std::move(*logprobs));
    cv_.notify_all();
  }
  void emit_prompt(std::vector<model::TokenLogprobs> logprobs) {
    std::lock_guard lock(mutex_);
    for (auto& l : logprobs) pending_prompt_logprobs_.push_back(std::move(l));
    cv_.notify_all();
  }
  void finish(const std::string& reason, const std::string& error = "", const ServeError* as = nullptr) {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    reason_ = reason;
    error_ = error;
    if (as != nullptr) {
      error_status_ = as->status();
      error_type_ = as->type();
      error_code_ = as->code();
    }
    cv_.notify_all();
  }

  GenerationRequest request;
  model::TokenSampler sampler;
  Clock::time_point arrived;
  std::atomic<bool> cancelled{false};
  // Scheduler state (scheduler thread only, or under the engine's mutex).
  std::shared_ptr<Variant> variant;           ///< nullptr: the base model
  std::shared_ptr<const VariantDelta> delta;  ///< pinned while running (delta mode)
  std::shared_ptr<const LlamaModel> weights;  ///< full and swap modes: the model it runs on
  std::int64_t slot = -1, prefilled = 0, generated = 0, last_token = 0;
  std::int64_t passed_over = 0;  ///< requests admitted past it while the variant cap held it back
  bool done = false;
  std::string done_reason;

 private:
  std::function<void()> wake_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::int64_t> pending_;
  std::vector<model::TokenLogprobs> pending_logprobs_, pending_prompt_logprobs_;
  bool finished_ = false;
  std::string reason_, error_;
  int error_status_ = 500;
  std::string error_type_ = "server_error", error_code_;
};

// One forward call's rows.
struct StepRows {
  std::vector<Sequence*> seqs;
  std::vector<std::vector<std::int64_t>> tokens;
};

}  // namespace

ServeMode parse_serve_mode(const std::string& text) {
  if (text == "delta") return ServeMode::kDelta;
  if (text == "swap") return ServeMode::kSwap;
  if (text == "full") return ServeMode::kFull;
  throw UsageError("--mode must be delta, swap or full, not '" + text + "'");
}

std::string serve_mode_name(ServeMode mode) {
  switch (mode) {
    case ServeMode::kDelta:
      return "delta";
    case ServeMode::kSwap:
      return "swap";
    case ServeMode::kFull:
      return "full";
  }
  return "delta";
}

struct Engine::State {
  EngineOptions options;
  std::shared_ptr<const LlamaModel> base;
  text::Tokenizer tokenizer;
  std::optional<text::ModelChatTemplate> chat_template;
  std::vector<std::int64_t> stop_ids;  ///< ids that end a sequence
  std::string identity;
  std::int64_t context = 0;
  std::uint64_t base_bytes = 0;
  std::unique_ptr<model::KvCache> cache;
  MetricsRegistry metrics;

  mutable std::mutex mutex;
  std::condition_variable wake;
  bool dirty = false, stopping = false, shutting_down = false;
  std::string abort_message;  // set by abort_all: the scheduler ends every request with it
  std::deque<std::shared_ptr<Sequence>> waiting;
  std::vector<std::shared_ptr<Sequence>> running;
  std::vector<std::int64_t> free_slots;
  std::map<std::string, std::shared_ptr<Variant>> variants;
  std::uint64_t delta_bytes = 0, full_bytes = 0;
  std::deque<std::shared_ptr<Variant>> load_queue;
  std::condition_variable load_wake;
  // Swap mode: the fine-tune resident now (null: the base). Compared as the
  // variant object, never by name: a name unloaded and loaded again from
  // another container is another variant, and must be swapped in.
  std::shared_ptr<Variant> swap_current;
  std::shared_ptr<const LlamaModel> swap_model;
  std::thread scheduler, loader;

  State(EngineOptions o, text::Tokenizer t) : options(std::move(o)), tokenizer(std::move(t)) {}

  void notify() {
    {
      std::lock_guard lock(mutex);
      dirty = true;
    }
    wake.notify_all();
  }
  void declare_metrics();
  void update_gauges();
  void update_adapter_info();        // vllm:lora_requests_info, for /metrics
  MetricLabels vllm_labels() const;  // {model_name: the base's served name}
  void scheduler_loop();
  void loader_loop();
  void admit(std::unique_lock<std::mutex>& lock);
  void drop_unservable_waiting();  // cancelled requests, and those of variants that failed to load
  void swap_to(const std::shared_ptr<Variant>& target, std::unique_lock<std::mutex>& lock);
  void evict_to_budget();
  /// Ends a request; with `as`, its error reaches the client with that
  /// status, type and code (else 500, server_error).
  void finish(const std::shared_ptr<Sequence>& seq, const std::string& reason, const std::string& error = "",
              const ServeError* as = nullptr);
  void fail(const std::shared_ptr<Sequence>& seq, const ServeError& e) { finish(seq, "error", e.what(), &e); }
  // Under the lock: ends every request with abort_message.
  void abort_everything();
  // Under the lock: frees the slots of cancelled requests.
  void drop_cancelled();
  // Under the lock: this step's rows, one token for every decoding sequence,
  // then prompt chunks within what is left of the token budget.
  void plan_step(StepRows& decode, StepRows& prefill, std::int64_t& prefill_width);
  // Under the lock: ends the requests the step finished (all of them when it failed).
  void end_finished(const std::string& error);
  void run_rows(StepRows& rows, std::int64_t width, bool decode);
  // Rows of one variant side by side: one segment (one SBMM) per variant.
  StepRows grouped_by_weights(StepRows& rows) const;
  // A prefill's prompt log-probabilities from every position's logits; the
  // logits of each row's last position.
  torch::Tensor emit_prompt_logprobs(const StepRows& rows, const torch::Tensor& logits,
                                     const std::vector<std::int64_t>& counts);
  // Samples a row's next token from its logits, emits it and ends the
  // sequence at an end-of-sequence token or max_tokens.
  void take_next_token(Sequence& seq, std::span<const float> scores);
  torch::Tensor forward(const StepRows& rows, const torch::Tensor& tokens, const std::vector<std::int64_t>& slots,
                        const std::vector<std::int64_t>& counts, bool all_positions);
};

void Engine::State::declare_metrics() {
  const auto latency = exponential_buckets(0.005, 2, 16);
  metrics.counter("dz_requests", "Requests accepted, per model");
  metrics.counter("dz_requests_finished", "Requests that left the engine, per reason (stop, length, cancelled, error)");
  metrics.counter("dz_requests_rejected", "Requests refused before queueing, per HTTP status");
  metrics.counter("dz_prompt_tokens", "Prompt tokens of accepted requests, per model");
  metrics.counter("dz_generated_tokens", "Tokens generated, per model");
  metrics.gauge("dz_queue_length", "Requests waiting for a slot");
  metrics.gauge("dz_running_sequences", "Sequences in the running batch");
  metrics.histogram("dz_batch_size", "Sequences per scheduler step", exponential_buckets(1, 2, 10));
  metrics.histogram("dz_batch_variants", "Distinct variants per scheduler step (the base not counted)",
                    {1, 2, 3, 4, 6, 8, 12, 16, 32});
  metrics.histogram("dz_step_seconds", "Duration of one scheduler step (decode and prefill)", latency);
  metrics.histogram("dz_time_to_first_token_seconds", "Arrival to first generated token", latency);
  metrics.histogram("dz_request_latency_seconds", "Arrival to last generated token", latency);
  metrics.counter("dz_delta_loads", "Deltas loaded from disk into memory");
  metrics.counter("dz_delta_evictions", "Resident deltas dropped to stay within --delta-memory");
  metrics.counter("dz_delta_hits", "Admissions whose delta was resident");
  metrics.counter("dz_delta_misses", "Admissions that had to wait for a delta load");
  metrics.counter("dz_model_swaps", "Swap mode: fine-tunes reconstructed to become the resident model");
  metrics.gauge("dz_resident_bytes", "Bytes held in memory, per part (base, deltas, full_models, kv_cache)");
  metrics.gauge("dz_full_models_equivalent_bytes", "Bytes the registered variants would take as full models");
  metrics.gauge("dz_variants", "Registered variants");
  // The unlabelled counters export 0 from the start (a Prometheus client's
  // default): a rate over a series that appears only at its first event
  // misses that event.
  for (const char* unlabelled :
       {"dz_delta_loads", "dz_delta_evictions", "dz_delta_hits", "dz_delta_misses", "dz_model_swaps"})
    metrics.add(unlabelled, 0);
  // The same under vLLM's names and labels, so that dashboards and routers
  // written for vLLM (which label by model_name, the served base) read them.
  metrics.gauge("vllm:num_requests_running", "Requests running (vLLM's name)");
  metrics.gauge("vllm:num_requests_waiting", "Requests waiting (vLLM's name)");
  metrics.counter("vllm:request_success", "Requests finished, per finished_reason (stop, length; vLLM's name)");
  metrics.counter("vllm:prompt_tokens", "Prompt tokens of accepted requests (vLLM's name)");
  metrics.counter("vllm:generation_tokens", "Tokens generated (vLLM's name)");
  metrics.histogram("vllm:time_to_first_token_seconds", "Arrival to first generated token (vLLM's name)", latency);
  metrics.histogram("vllm:e2e_request_latency_seconds", "Arrival to last generated token (vLLM's name)", latency);
  metrics.gauge("vllm:lora_requests_info",
                "Variants with running and waiting requests, as vLLM's adapter labels (value: the time, seconds)");
}

MetricLabels Engine::State::vllm_labels() const { return {{"model_name", options.base_name}}; }

void Engine::State::update_adapter_info() {
  // vLLM's adapter gauge: one series, its labels the variant lists
  // (comma-separated). Built when /metrics is read, not at every step.
  std::set<std::string> running_names, waiting_names;
  for (const auto& r : running)
    if (r->variant) running_names.insert(r->variant->name);
  for (const auto& w : waiting)
    if (w->variant) waiting_names.insert(w->variant->name);
  auto joined = [](const std::set<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
    return out;
  };
  metrics.clear("vllm:lora_requests_info");
  metrics.set("vllm:lora_requests_info", static_cast<double>(std::time(nullptr)),
              {{"running_lora_adapters", joined(running_names)},
               {"waiting_lora_adapters", joined(waiting_names)},
               {"max_lora", std::to_string(options.max_variants_per_batch)}});
}

void Engine::State::update_gauges() {
  metrics.set("dz_queue_length", static_cast<double>(waiting.size()));
  metrics.set("dz_running_sequences", static_cast<double>(running.size()));
  metrics.set("vllm:num_requests_waiting", static_cast<double>(waiting.size()), vllm_labels());
  metrics.set("vllm:num_requests_running", static_cast<double>(running.size()), vllm_labels());
  metrics.set("dz_resident_bytes", static_cast<double>(base_bytes), {{"part", "base"}});
  metrics.set("dz_resident_bytes", static_cast<double>(delta_bytes), {{"part", "deltas"}});
  metrics.set("dz_resident_bytes", static_cast<double>(full_bytes), {{"part", "full_models"}});
  metrics.set("dz_resident_bytes", static_cast<double>(cache->bytes()), {{"part", "kv_cache"}});
  metrics.set("dz_full_models_equivalent_bytes", static_cast<double>(base_bytes * variants.size()));
  metrics.set("dz_variants", static_cast<double>(variants.size()));
}

Engine::Engine(EngineOptions options) {
  if (options.max_batch <= 0 || options.max_batch > 4096) throw UsageError("--max-batch must be 1 to 4096");
  if (options.max_tokens_per_step <= 0) throw UsageError("--max-tokens-per-step must be positive");
  if (options.max_queue <= 0) throw UsageError("--max-queue must be positive");
  if (options.max_variants_per_batch < -1)
    throw UsageError("--max-variants-per-batch must be -1 (the default, 4), 0 (no limit) or more");
  const auto compute = model::resolve_device(options.device);
  // Measured on both kinds of device (docs/serving.md): on a GPU each
  // variant in a step is one more launch per layer; on a CPU full mode
  // streams each one's weights (a cap of 4 served 41 % more at 16 variants)
  // and delta mode came out even.
  if (options.max_variants_per_batch == -1) options.max_variants_per_batch = 4;
  const torch::Device device = compute == model::ComputeDevice::kCuda ? torch::kCUDA : torch::kCPU;
  if (compute == model::ComputeDevice::kCuda && options.mode == ServeMode::kDelta && !FLEET_WITH_CUDA)
    throw UsageError(
        "--device cuda in delta mode needs the CUDA SBMM kernel: this build has no CUDA toolkit "
        "(docs/gpu.md); swap and full modes run without it");
  // The base folder is opened once; its mapping ends with the constructor,
  // when everything served from it has been copied out.
  const model::ModelFolder folder(options.base);
  state_ = std::make_unique<State>(std::move(options), folder.load_tokenizer());
  auto& s = *state_;
  if (s.options.base_name.empty()) s.options.base_name = std::filesystem::absolute(s.options.base).filename().string();
  // float32 on either device: the SBMM kernels read and write float32.
  s.base = std::make_shared<const LlamaModel>(LlamaModel::load(folder, torch::kFloat32, device));
  s.identity = base_identity(folder);
  try {
    s.chat_template = folder.load_chat_template();
  } catch (const InputError& e) {
    // Serving completions does not need it: say why and chat with the plain template.
    spdlog::warn("{}; chat requests use the plain template (docs/serving.md)", e.what());
  }
  // config.json's and generation_config.json's end-of-sequence ids, and the
  // chat template's end token (Llama 3 Instruct ends a turn with <|eot_id|>).
  s.stop_ids = folder.end_of_sequence_ids();
  if (s.chat_template && !s.chat_template->eos_token.empty())
    if (auto id = s.tokenizer.token_id(s.chat_template->eos_token);
        id && std::find(s.stop_ids.begin(), s.stop_ids.end(), *id) == s.stop_ids.end())
      s.stop_ids.push_back(*id);
  s.base_bytes = model_bytes(*s.base);
  const auto limit = s.base->config().max_position_embeddings;
  if (s.options.max_context < 0) throw UsageError("--max-context must be positive");
  s.context = s.options.max_context == 0 ? std::min<std::int64_t>(limit, 4096) : s.options.max_context;
  if (s.context > limit)
    throw UsageError("--max-context " + std::to_string(s.context) + " exceeds the model's max_position_embeddings (" +
                     std::to_string(limit) + ")");
  s.cache = std::make_unique<model::KvCache>(s.base->config(), s.options.max_batch, s.context, s.base->dtype(), device);
  for (std::int64_t i = s.options.max_batch - 1; i >= 0; --i) s.free_slots.push_back(i);
  s.declare_metrics();
  s.update_gauges();
  s.scheduler = std::thread([&s] { s.scheduler_loop(); });
  s.loader = std::thread([&s] { s.loader_loop(); });
  spdlog::info("base {} ({}): {} parameters, context {} tokens, {} KV slots ({:.1f} MiB), mode {}, on {}",
               s.options.base_name, s.options.base.string(), s.base_bytes / 4, s.context, s.options.max_batch,
               static_cast<double>(s.cache->bytes()) / (1 << 20), serve_mode_name(s.options.mode),
               model::device_name(compute));
}

Engine::~Engine() {
  auto& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    s.stopping = true;
  }
  s.wake.notify_all();
  s.load_wake.notify_all();
  if (s.scheduler.joinable()) s.scheduler.join();
  if (s.loader.joinable()) s.loader.join();
}

void Engine::add_variant(const std::string& name, const std::filesystem::path& delta) {
  auto& s = *state_;
  if (name.empty() || name.size() > 256)
    throw ServeError(400, "invalid_request_error", "a variant name must have 1 to 256 characters", "name");
  {
    std::lock_guard lock(s.mutex);
    if (name == s.options.base_name || s.variants.count(name))
      throw ServeError(400, "invalid_request_error", "a model named '" + name + "' is already served", "name");
  }
  std::unique_ptr<DeltaReader> reader;
  try {
    reader = std::make_unique<DeltaReader>(delta);
  } catch (const std::exception& e) {
    throw ServeError(400, "invalid_request_error", std::string("cannot read the delta: ") + e.what(), "path");
  }
  if (reader->header().base_identity != s.identity)
    throw ServeError(400, "invalid_request_error",
                     delta.string() + " was made for a base model with identity " + reader->header().base_identity +
                         ", but this server's base is " + s.identity,
                     "path");
  try {
    check_same_architecture(s.base->config(), delta_config(*reader), delta.string());
  } catch (const std::exception& e) {
    throw ServeError(400, "invalid_request_error", e.what(), "path");
  }
  auto v = std::make_shared<Variant>();
  v->name = name;
  v->path = delta;
  if (s.options.mode == ServeMode::kFull) {
    torch::NoGradGuard no_grad;
    v->full = std::make_shared<const LlamaModel>(reconstruct_on_base_device(*reader, *s.base));
  }
  std::lock_guard lock(s.mutex);
  if (s.variants.count(name))
    throw ServeError(400, "invalid_request_error", "a model named '" + name + "' is already served", "name");
  if (v->full) s.full_bytes += s.base_bytes;
  s.variants[name] = v;
  s.update_gauges();
  spdlog::info("variant {}: {}", name, delta.string());
}

void Engine::remove_variant(const std::string& name) {
  auto& s = *state_;
  std::lock_guard lock(s.mutex);
  auto it = s.variants.find(name);
  if (it == s.variants.end()) throw ServeError(404, "not_found_error", "no variant named '" + name + "'", "name");
  auto v = it->second;
  s.variants.erase(it);
  // Requests already running keep their pinned weights; queued ones fail.
  for (auto q = s.waiting.begin(); q != s.waiting.end();) {
    if ((*q)->variant == v) {
      s.fail(*q, ServeError(404, "not_found_error", "model '" + name + "' was unloaded", "model", "model_not_found"));
      q = s.waiting.erase(q);
    } else {
      ++q;
    }
  }
  if (v->delta) s.delta_bytes -= v->delta->bytes;
  if (v->full) s.full_bytes -= s.base_bytes;
  v->delta.reset();
  v->full.reset();
  if (s.swap_current == v) {  // its swapped-in model goes too (running requests hold their own reference)
    s.swap_current.reset();
    s.swap_model.reset();
    s.full_bytes = 0;
  }
  s.update_gauges();
}

std::vector<ModelInfo> Engine::models() const {
  auto& s = *state_;
  std::lock_guard lock(s.mutex);
  std::vector<ModelInfo> out{{s.options.base_name, true, s.options.base.string(), "resident"}};
  for (const auto& [name, v] : s.variants) {
    std::string state = v->failed.empty() ? (v->delta || v->full || s.swap_current == v ? "resident"
                                             : v->loading                               ? "loading"
                                                                                        : "cold")
                                          : "failed";
    out.push_back({name, false, v->path.string(), state});
  }
  return out;
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
  auto& s = *state_;
  auto reject = [&](int status, const std::string& type, const std::string& message, const std::string& param,
                    const std::string& code = "") {
    throw ServeError(status, type, message, param, code);  // counted by the front end, with the parse errors
  };
  // An unknown model first, whatever else is wrong with the request (OpenAI's order).
  if (request.model != s.options.base_name) {
    std::lock_guard lock(s.mutex);
    if (!s.variants.count(request.model))
      reject(404, "not_found_error", "the model '" + request.model + "' does not exist", "model", "model_not_found");
  }
  const auto prompt = static_cast<std::int64_t>(request.prompt.size());
  if (prompt == 0) reject(400, "invalid_request_error", "the prompt is empty", "prompt");
  for (auto t : request.prompt)
    if (t < 0 || t >= s.base->config().vocab_size)
      reject(400, "invalid_request_error", "token id " + std::to_string(t) + " is outside the vocabulary", "prompt");
  for (const auto& [t, bias] : request.sampling.logit_bias)
    if (t < 0 || t >= s.base->config().vocab_size)
      reject(400, "invalid_request_error", "logit_bias: token id " + std::to_string(t) + " is outside the vocabulary",
             "logit_bias");
  if (prompt > s.context)
    reject(
        400, "invalid_request_error",
        "the prompt has " + std::to_string(prompt) + " tokens; this server's context is " + std::to_string(s.context),
        "prompt", "context_length_exceeded");
  if (request.max_tokens <= 0) reject(400, "invalid_request_error", "max_tokens must be at least 1", "max_tokens");
  if (prompt + request.max_tokens > s.context)
    reject(400, "invalid_request_error",
           "prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" + std::to_string(request.max_tokens) +
               ") exceeds the context of " + std::to_string(s.context) + " tokens",
           "max_tokens", "context_length_exceeded");
  if (request.logprobs < -1 || request.logprobs > kMaxTopLogprobs)
    reject(400, "invalid_request_error", "logprobs must be 0 to " + std::to_string(kMaxTopLogprobs), "logprobs");
  if (request.prompt_logprobs && request.logprobs < 0)
    reject(400, "invalid_request_error", "the prompt's log-probabilities need logprobs", "logprobs");
  try {
    request.sampling.validate();
  } catch (const std::exception& e) {
    reject(400, "invalid_request_error", e.what(), "");
  }
  auto seq = std::make_shared<Sequence>(std::move(request), [&s] { s.notify(); });
  {
    std::lock_guard lock(s.mutex);
    if (s.shutting_down || s.stopping) reject(503, "service_unavailable", "the server is shutting down", "");
    if (seq->request.model != s.options.base_name) {
      auto it = s.variants.find(seq->request.model);
      if (it == s.variants.end())
        reject(404, "not_found_error", "the model '" + seq->request.model + "' does not exist", "model",
               "model_not_found");
      seq->variant = it->second;
    }
    if (static_cast<std::int64_t>(s.waiting.size()) >= s.options.max_queue)
      reject(429, "rate_limit_error",
             "the queue is full (" + std::to_string(s.options.max_queue) + " requests waiting)", "");
    s.waiting.push_back(seq);
    s.dirty = true;
    s.metrics.add("dz_requests", 1, {{"model", seq->request.model}});
    s.metrics.add("dz_prompt_tokens", static_cast<double>(prompt), {{"model", seq->request.model}});
    s.metrics.add("vllm:prompt_tokens", static_cast<double>(prompt), s.vllm_labels());
    s.update_gauges();
  }
  s.wake.notify_all();
  return seq;
}

void Engine::State::finish(const std::shared_ptr<Sequence>& seq, const std::string& reason, const std::string& error,
                           const ServeError* as) {
  if (seq->slot >= 0) {
    cache->reset(seq->slot);
    free_slots.push_back(seq->slot);
    seq->slot = -1;
  }
  if (seq->variant && (seq->delta || seq->weights)) seq->variant->active--;
  seq->delta.reset();
  seq->weights.reset();
  if (error.empty() && reason != "cancelled") {
    metrics.observe("dz_request_latency_seconds", seconds_since(seq->arrived));
    metrics.observe("vllm:e2e_request_latency_seconds", seconds_since(seq->arrived), vllm_labels());
  }
  metrics.add("dz_requests_finished", 1, {{"reason", reason}});
  if (reason == "stop" || reason == "length") {
    auto labels = vllm_labels();
    labels.emplace_back("finished_reason", reason);
    metrics.add("vllm:request_success", 1, labels);
  }
  seq->finish(reason, error, as);
}

void Engine::State::evict_to_budget() {
  if (options.delta_memory == 0) return;
  while (delta_bytes > options.delta_memory) {
    std::shared_ptr<Variant> victim;
    for (auto& [name, v] : variants)
      if (v->delta && v->active == 0 && (!victim || v->last_used < victim->last_used)) victim = v;
    if (!victim) return;  // every resident delta is in use: over budget until one finishes
    delta_bytes -= victim->delta->bytes;
    victim->delta.reset();
    metrics.add("dz_delta_evictions", 1);
    spdlog::debug("evicted delta {}", victim->name);
  }
}

void Engine::State::loader_loop() {
  torch::NoGradGuard no_grad;
  std::unique_lock lock(mutex);
  while (true) {
    load_wake.wait(lock, [&] { return stopping || !load_queue.empty(); });
    if (stopping) return;
    auto v = load_queue.front();
    load_queue.pop_front();
    lock.unlock();
    std::shared_ptr<const VariantDelta> loaded;
    std::string error;
    const auto started = Clock::now();
    try {
      if (options.before_delta_load) options.before_delta_load(v->name);
      DeltaReader reader(v->path);
      loaded = VariantDelta::load(v->name, reader, *base);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    v->loading = false;
    if (!error.empty()) {
      v->failed = error;
      spdlog::error("variant {}: {}", v->name, error);
    } else if (options.delta_memory && loaded->bytes > options.delta_memory) {
      v->failed = "its delta needs " + std::to_string(loaded->bytes) + " bytes, more than --delta-memory (" +
                  std::to_string(options.delta_memory) + ")";
    } else if (variants.count(v->name) && variants.at(v->name) == v) {
      v->delta = loaded;
      v->last_used = Clock::now();  // newest: not the first to go when the budget is tight
      delta_bytes += loaded->bytes;
      metrics.add("dz_delta_loads", 1);
      spdlog::debug("loaded delta {} ({} bytes) in {:.3f} s", v->name, loaded->bytes, seconds_since(started));
      evict_to_budget();
    }
    dirty = true;
    update_gauges();
    wake.notify_all();
  }
}

void Engine::State::swap_to(const std::shared_ptr<Variant>& target, std::unique_lock<std::mutex>& lock) {
  swap_model.reset();
  full_bytes = 0;
  swap_current = target;
  if (!target) return;
  lock.unlock();
  std::shared_ptr<const LlamaModel> model;
  std::string error;
  try {
    torch::NoGradGuard no_grad;
    DeltaReader reader(target->path);
    model = std::make_shared<const LlamaModel>(reconstruct_on_base_device(reader, *base));
  } catch (const std::exception& e) {
    error = e.what();
  }
  lock.lock();
  metrics.add("dz_model_swaps", 1);
  if (!error.empty()) {
    target->failed = error;
    swap_current.reset();
    return;
  }
  swap_model = model;
  full_bytes = base_bytes;
}

void Engine::State::drop_unservable_waiting() {
  // Failed variants fail their queued requests; cancelled ones leave.
  for (auto it = waiting.begin(); it != waiting.end();) {
    auto& seq = *it;
    if (seq->cancelled) {
      finish(seq, "cancelled");
      it = waiting.erase(it);
    } else if (seq->variant && !seq->variant->failed.empty()) {
      finish(seq, "error", "model '" + seq->variant->name + "' could not be loaded: " + seq->variant->failed);
      it = waiting.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::State::admit(std::unique_lock<std::mutex>& lock) {
  drop_unservable_waiting();
  if (options.mode == ServeMode::kSwap && running.empty() && !waiting.empty()) {
    auto& head = waiting.front();
    if (head->variant != swap_current) {
      auto target = head->variant;
      swap_to(target, lock);
      dirty = true;  // look again: the queue may have changed while the lock was released
      return;
    }
  }
  // Variants with sequences in the batch: each costs one delta product (or one
  // model's forward) per layer and step, whatever its number of rows.
  std::set<const Variant*> present;
  for (const auto& r : running)
    if (r->variant) present.insert(r->variant.get());
  const auto cap = static_cast<std::size_t>(options.max_variants_per_batch);
  std::vector<Sequence*> held;  // requests the cap held back in this pass
  for (auto it = waiting.begin(); it != waiting.end() && !free_slots.empty();) {
    auto seq = *it;
    auto& v = seq->variant;
    // A request for one more variant than the cap allows waits for one to
    // leave the batch, while later requests for variants in the batch go
    // ahead of it (as vLLM's max_loras does): the batch stays full and the
    // variants it holds gain rows, not products. Once a batch's worth of
    // requests has gone ahead of it, it stops everything behind it until its
    // variant fits, so a rarely asked variant never starves.
    if (v && cap > 0 && options.mode != ServeMode::kSwap && !present.count(v.get()) && present.size() >= cap) {
      if (seq->passed_over >= options.max_batch) return;
      held.push_back(seq.get());
      ++it;
      continue;
    }
    bool ready = true;
    switch (options.mode) {
      case ServeMode::kDelta:
        if (v && !v->delta) {
          ready = false;
          if (!v->loading) {
            v->loading = true;
            load_queue.push_back(v);
            load_wake.notify_all();
            metrics.add("dz_delta_misses", 1);
          }
        } else if (v) {
          metrics.add("dz_delta_hits", 1);
          seq->delta = v->delta;
        }
        break;
      case ServeMode::kFull:
        if (v) seq->weights = v->full;
        break;
      case ServeMode::kSwap: {
        // First come, first served: stop at the first request for another model.
        if (v != swap_current) return;
        if (v) seq->weights = swap_model;
        break;
      }
    }
    if (!ready) {
      ++it;
      continue;
    }
    if (v) {
      v->active++;
      v->last_used = Clock::now();
      present.insert(v.get());
    }
    for (auto* h : held) h->passed_over++;
    seq->slot = free_slots.back();
    free_slots.pop_back();
    running.push_back(seq);
    it = waiting.erase(it);
  }
}

torch::Tensor Engine::State::forward(const StepRows& rows, const torch::Tensor& tokens,
                                     const std::vector<std::int64_t>& slots, const std::vector<std::int64_t>& counts,
                                     bool all_positions) {
  const auto B = static_cast<std::int64_t>(rows.seqs.size());
  if (options.mode == ServeMode::kDelta) {
    std::vector<VariantSegment> segments;
    for (std::int64_t b = 0; b < B; ++b) {
      const VariantDelta* v = rows.seqs[static_cast<std::size_t>(b)]->delta.get();
      if (segments.empty() || segments.back().variant != v) segments.push_back({b, 0, v});
      segments.back().count++;
    }
    DeltaOverlay overlay(std::move(segments), B);
    return base->forward_cached(*cache, slots, tokens, counts, all_positions, &overlay);
  }
  // Full and swap modes: one call per model present (rows are sorted by model).
  std::vector<torch::Tensor> parts;
  for (std::int64_t b = 0; b < B;) {
    const LlamaModel* m = rows.seqs[static_cast<std::size_t>(b)]->weights.get();
    std::int64_t e = b;
    while (e < B && rows.seqs[static_cast<std::size_t>(e)]->weights.get() == m) ++e;
    std::vector<std::int64_t> part_slots(slots.begin() + b, slots.begin() + e),
        part_counts(counts.begin() + b, counts.begin() + e);
    parts.push_back(
        (m ? *m : *base).forward_cached(*cache, part_slots, tokens.narrow(0, b, e - b), part_counts, all_positions));
    b = e;
  }
  return torch::cat(parts, 0);
}

StepRows Engine::State::grouped_by_weights(StepRows& rows) const {
  std::vector<std::size_t> order(rows.seqs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](std::size_t i) {
    const auto* s = rows.seqs[i];
    return options.mode == ServeMode::kDelta ? static_cast<const void*>(s->delta.get())
                                             : static_cast<const void*>(s->weights.get());
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return std::less<const void*>()(key(a), key(b)); });
  StepRows sorted;
  for (auto i : order) {
    sorted.seqs.push_back(rows.seqs[i]);
    sorted.tokens.push_back(std::move(rows.tokens[i]));
  }
  return sorted;
}

torch::Tensor Engine::State::emit_prompt_logprobs(const StepRows& rows, const torch::Tensor& logits,
                                                  const std::vector<std::int64_t>& counts) {
  std::vector<torch::Tensor> last;
  for (std::size_t b = 0; b < rows.seqs.size(); ++b) {
    auto* seq = rows.seqs[b];
    const auto n = counts[b];
    const auto row_logits = logits[static_cast<std::int64_t>(b)];
    last.push_back(row_logits[n - 1]);
    if (!seq->request.prompt_logprobs) continue;
    // Position p predicts prompt token prefilled + p + 1 (the prompt's last predicts the first generated).
    std::vector<model::TokenLogprobs> entries;
    const auto& prompt = seq->request.prompt;
    for (std::int64_t p = 0; p < n && seq->prefilled + p + 1 < static_cast<std::int64_t>(prompt.size()); ++p) {
      auto row = row_logits[p];
      entries.push_back(model::token_logprobs({row.data_ptr<float>(), static_cast<std::size_t>(row.size(0))},
                                              prompt[static_cast<std::size_t>(seq->prefilled + p + 1)],
                                              static_cast<std::size_t>(seq->request.logprobs)));
    }
    seq->emit_prompt(std::move(entries));
  }
  return torch::stack(last).contiguous();
}

void Engine::State::take_next_token(Sequence& seq, std::span<const float> scores) {
  const auto token = seq.sampler.next(scores);
  if (seq.generated == 0) {
    metrics.observe("dz_time_to_first_token_seconds", seconds_since(seq.arrived));
    metrics.observe("vllm:time_to_first_token_seconds", seconds_since(seq.arrived), vllm_labels());
  }
  seq.generated++;
  if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    seq.done = true;
    seq.done_reason = "stop";
    return;
  }
  metrics.add("dz_generated_tokens", 1, {{"model", seq.request.model}});
  metrics.add("vllm:generation_tokens", 1, vllm_labels());
  std::optional<model::TokenLogprobs> logprobs;
  if (seq.request.logprobs >= 0)
    logprobs = model::token_logprobs(scores, token, static_cast<std::size_t>(seq.request.logprobs));
  seq.emit(token, std::move(logprobs));
  seq.last_token = token;
  if (seq.generated >= seq.request.max_tokens) {
    seq.done = true;
    seq.done_reason = "length";
  }
}

void Engine::State::run_rows(StepRows& rows, std::int64_t width, bool decode) {
  const auto B = static_cast<std::int64_t>(rows.seqs.size());
  if (B == 0) return;
  StepRows sorted = grouped_by_weights(rows);
  auto tokens = torch::zeros({B, width}, torch::kInt64);
  auto* data = tokens.data_ptr<std::int64_t>();
  std::vector<std::int64_t> slots, counts;
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& t = sorted.tokens[static_cast<std::size_t>(b)];
    std::copy(t.begin(), t.end(), data + b * width);
    slots.push_back(sorted.seqs[static_cast<std::size_t>(b)]->slot);
    counts.push_back(static_cast<std::int64_t>(t.size()));
  }
  // A prefill whose prompt's log-probabilities were asked for needs the logits
  // of every position (for the whole step: one forward).
  const bool all_positions = !decode && std::any_of(sorted.seqs.begin(), sorted.seqs.end(),
                                                    [](const Sequence* s) { return s->request.prompt_logprobs; });
  // Sampling runs on the CPU: the logits come back (on a GPU, this waits for the step).
  auto logits = forward(sorted, tokens.to(base->device()), slots, counts, all_positions).to(torch::kCPU).contiguous();
  if (all_positions) logits = emit_prompt_logprobs(sorted, logits, counts);
  for (std::int64_t b = 0; b < B; ++b) {
    auto* seq = sorted.seqs[static_cast<std::size_t>(b)];
    if (!decode) {
      seq->prefilled += counts[static_cast<std::size_t>(b)];
      if (seq->prefilled < static_cast<std::int64_t>(seq->request.prompt.size())) continue;
    }
    take_next_token(*seq, {logits[b].data_ptr<float>(), static_cast<std::size_t>(logits.size(1))});
  }
}

void Engine::State::abort_everything() {
  const ServeError ended(503, "service_unavailable", abort_message);
  for (auto& seq : running) fail(seq, ended);
  for (auto& seq : waiting) fail(seq, ended);
  running.clear();
  waiting.clear();
  update_gauges();
}

void Engine::State::drop_cancelled() {
  for (auto it = running.begin(); it != running.end();) {
    if ((*it)->cancelled) {
      finish(*it, "cancelled");
      it = running.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::State::plan_step(StepRows& decode, StepRows& prefill, std::int64_t& prefill_width) {
  for (auto& seq : running)
    if (seq->prefilled == static_cast<std::int64_t>(seq->request.prompt.size())) {
      decode.seqs.push_back(seq.get());
      decode.tokens.push_back({seq->last_token});
    }
  // At least one token of prompt, so prompts always progress.
  std::int64_t budget =
      std::max<std::int64_t>(options.max_tokens_per_step - static_cast<std::int64_t>(decode.seqs.size()), 1);
  for (auto& seq : running) {
    const auto remaining = static_cast<std::int64_t>(seq->request.prompt.size()) - seq->prefilled;
    if (remaining == 0 || budget == 0) continue;
    const auto chunk = std::min(remaining, budget);
    budget -= chunk;
    prefill.seqs.push_back(seq.get());
    prefill.tokens.emplace_back(seq->request.prompt.begin() + seq->prefilled,
                                seq->request.prompt.begin() + seq->prefilled + chunk);
    prefill_width = std::max(prefill_width, chunk);
  }
}

void Engine::State::end_finished(const std::string& error) {
  for (auto it = running.begin(); it != running.end();) {
    auto& seq = *it;
    if (!error.empty() || seq->done) {
      finish(seq, error.empty() ? seq->done_reason : "error", error);
      it = running.erase(it);
      dirty = true;  // a slot is free (and in swap mode, perhaps the model)
    } else {
      ++it;
    }
  }
}

void Engine::State::scheduler_loop() {
  torch::NoGradGuard no_grad;
  std::unique_lock lock(mutex);
  while (true) {
    wake.wait(lock, [&] { return stopping || dirty || !running.empty(); });
    if (stopping) break;
    dirty = false;
    if (!abort_message.empty()) {
      abort_everything();
      continue;
    }
    drop_cancelled();
    admit(lock);
    evict_to_budget();
    update_gauges();
    if (running.empty()) continue;
    StepRows decode, prefill;
    std::int64_t prefill_width = 0;
    plan_step(decode, prefill, prefill_width);
    const auto batch = static_cast<double>(decode.seqs.size() + prefill.seqs.size());
    std::set<const Variant*> stepping;
    for (const auto& seq : running)
      if (seq->variant) stepping.insert(seq->variant.get());
    lock.unlock();
    const auto started = Clock::now();
    std::string error;
    try {
      run_rows(decode, 1, true);
      run_rows(prefill, prefill_width, false);
    } catch (const std::exception& e) {
      error = e.what();
      spdlog::error("scheduler step failed: {}", error);
    }
    lock.lock();
    metrics.observe("dz_step_seconds", seconds_since(started));
    metrics.observe("dz_batch_size", batch);
    metrics.observe("dz_batch_variants", static_cast<double>(stepping.size()));
    end_finished(error);
  }
  for (auto& seq : running) finish(seq, "error", "the server stopped");
  for (auto& seq : waiting) finish(seq, "error", "the server stopped");
  running.clear();
  waiting.clear();
}

const text::Tokenizer& Engine::tokenizer() const { return state_->tokenizer; }
const text::ModelChatTemplate* Engine::chat_template() const {
  return state_->chat_template ? &*state_->chat_template : nullptr;
}
const std::string& Engine::base_name() const { return state_->options.base_name; }
std::int64_t Engine::max_context() const { return state_->context; }
std::int64_t Engine::eos_token_id() const { return state_->base->config().eos_token_id; }
const std::vector<std::int64_t>& Engine::end_of_sequence_ids() const { return state_->stop_ids; }
std::int64_t Engine::bos_token_id() const { return state_->base->config().bos_token_id; }
MetricsRegistry& Engine::metrics() { return state_->metrics; }

std::string Engine::metrics_text() const {
  {
    std::lock_guard lock(state_->mutex);
    state_->update_gauges();
    state_->update_adapter_info();
  }
  return state_->metrics.render();
}

void Engine::begin_shutdown() {
  std::lock_guard lock(state_->mutex);
  state_->shutting_down = true;
}

bool Engine::shutting_down() const {
  std::lock_guard lock(state_->mutex);
  return state_->shutting_down;
}

void Engine::abort_all(const std::string& message) {
  {
    std::lock_guard lock(state_->mutex);
    state_->abort_message = message.empty() ? "aborted" : message;
    state_->dirty = true;
  }
  state_->wake.notify_all();
}

bool Engine::idle() const {
  std::lock_guard lock(state_->mutex);
  return state_->waiting.empty() && state_->running.empty();
}

}  // namespace fleet::deltazip
