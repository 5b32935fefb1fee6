// The key-value store an elastic job is coordinated through: libtorch's
// c10d TCPStore, served by the controller (`sailor-run launch --elastic`)
// and reached by the workers, `sailor-run join` and `sailor-run status`.
// The keys are documented in docs/training-runtime.md ("In-place recovery").
// Torch-free header: the launcher and the program include it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fleet::sailor::runtime {

/// Store keys of the elastic protocol (docs/training-runtime.md).
namespace control_keys {
inline constexpr const char* kGeneration = "elastic/generation";  ///< the current generation, as decimal text
inline constexpr const char* kStatus = "elastic/status";          ///< the controller's JSON summary
inline constexpr const char* kJoinRequests = "elastic/join";      ///< counter: workers asked for by `sailor-run join`
inline constexpr const char* kDone = "elastic/done";              ///< set when the job is over: spare workers leave
inline constexpr const char* kRegistered = "elastic/registered";  ///< counter: workers that registered themselves
inline constexpr const char* kStopped = "elastic/stopped";        ///< why the job stopped without finishing
std::string generation_prefix(int generation);                    ///< "gen/<g>/"
std::string heartbeat(int worker);                                ///< "elastic/heartbeat/<worker>"
}  // namespace control_keys

/// Who does what in one generation, as the controller published it.
struct Membership {
  int generation = 0;
  std::vector<int> training;  ///< worker ids, in the order of their ranks
  std::vector<int> others;    ///< workers that only hand state over: spares, then those leaving
  std::vector<int> leaving;   ///< of `others`: workers that exit after the hand-over
  nlohmann::json plan;        ///< the plan the training ranks run
  /// The workers left admit no plan: the training ranks take the state over
  /// in this plan's layout only to write it as a checkpoint, then stop.
  bool save_only = false;

  /// The training rank of `worker`, or -1.
  int rank_of(int worker) const;
  /// Its rank among every member (training ranks first), or -1.
  int member_rank_of(int worker) const;
  int members() const { return static_cast<int>(training.size() + others.size()); }
  static Membership from_json(int generation, const std::string& text);
  std::string to_json() const;
};

class ControlStore {
 public:
  /// Serves a store on `port` of every interface (the controller).
  static std::unique_ptr<ControlStore> serve(int port, std::chrono::milliseconds timeout);
  /// A client of the store at host:port; RuntimeFailure when it cannot be reached within `timeout`.
  static std::unique_ptr<ControlStore> connect(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~ControlStore();
  ControlStore(const ControlStore&) = delete;
  ControlStore& operator=(const ControlStore&) = delete;

  void set(const std::string& key, const std::string& value);
  /// The value, or nothing when the key is not set.
  std::optional<std::string> get(const std::string& key);
  /// Adds `delta` to a counter (0 when unset) and returns the new value.
  std::int64_t add(const std::string& key, std::int64_t delta);
  int port() const;

 private:
  struct Impl;
  explicit ControlStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// "HOST:PORT" -> host and port; UsageError when malformed.
std::pair<std::string, int> parse_host_port(const std::string& address);

}  // namespace fleet::sailor::runtime
