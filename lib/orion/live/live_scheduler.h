// The scheduler side of the protocol (docs/orion-live.md): consumes the
// launches client processes post in the shared segment, keeps the view a
// policy decides on (the same lib/orion Policy objects the simulator runs),
// releases held best-effort launches when the policy admits them, and
// accounts for completions, request markers and clients that die.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "orion/device_spec.h"
#include "orion/kernel_profile.h"
#include "orion/live/shm_layout.h"
#include "orion/policy.h"

namespace fleet::orion::live {

/// One command the scheduler serves.
struct LiveClient {
  std::string name;
  bool high_priority = false;
  bool training = false;
  std::optional<KernelProfile> profile;  ///< one request/iteration; none: kernels judged by launch geometry
};

/// What the scheduler schedules.
struct LiveConfig {
  DeviceSpec device;
  std::vector<LiveClient> clients;
  std::string policy = "orion";
  PolicyOptions policy_options;
  /// What orion charges a best-effort kernel beside the HP request (the
  /// simulator's model; `orion-run exec --contention`).
  ContentionModel contention;
  /// Hides the hand-off between processes (a completion travelling from the
  /// client's event thread to the scheduler, the release back to the waiting
  /// launch): a released best-effort kernel counts as finished this long
  /// before its profiled duration has passed since it could start, so the
  /// next one is queued behind it on the GPU instead of waiting for the
  /// completion. Never while a kernel runs longer than its profile by more
  /// than this (the decisions then wait for completions again). 0: off.
  double release_ahead_us = 0;
  /// A best-effort launch held this long is released anyway, and the rest
  /// of its client's request goes without the policy's tests (under
  /// temporal sharing the client's request goes before the HP's at the next
  /// boundary): an HP command that never pauses would otherwise keep it
  /// forever. 0: never (the simulator's --max-be-wait).
  double max_be_wait_us = 100'000;
};

/// Per-command outcome.
struct LiveClientStats {
  std::string name;
  bool high_priority = false;
  std::int64_t processes = 0;        ///< processes that connected
  std::int64_t lost_processes = 0;   ///< of them, died with launches in flight or before disconnecting
  std::int64_t kernels = 0;          ///< launches seen
  std::int64_t unmatched = 0;        ///< launches whose kernel is not in the profile
  std::int64_t held = 0;             ///< launches the policy did not admit at first
  std::int64_t released_ahead = 0;   ///< released while best-effort work ahead of them was still expected to run
  std::int64_t forced = 0;           ///< released after max_be_wait_us held
  double held_ms = 0;                ///< total time launches waited for release
  std::int64_t requests = 0;         ///< completed begin/end marker pairs
  std::vector<double> latencies_ms;  ///< request latencies (marker to marker)
  std::vector<std::int64_t> request_end_ns;  ///< when each request's end marker was posted
  /// Requests whose process left (exited, was stopped or died) before
  /// posting their end marker: when they began, when the process left.
  struct Unfinished {
    std::int64_t begin_ns = 0, left_ns = 0;
  };
  std::vector<Unfinished> unfinished_requests;
  /// First and last event seen; a process that left with work in flight,
  /// held or a request open counts as at work until it left.
  std::int64_t first_ns = 0, last_ns = 0;
};

/// The scheduler's state machine over one segment. Not thread-safe: one thread polls.
class LiveScheduler {
 public:
  /// Prepares `segment` (flags for the clients) for `config`; InputError for
  /// a policy that does not fit the clients.
  LiveScheduler(SegmentHeader* segment, LiveConfig config);
  ~LiveScheduler();

  /// From now on writes one JSON line per event to `log` (null: none).
  void set_log(std::FILE* log);

  /// One pass over every slot: new launches, completions, decisions. True if anything changed.
  bool poll();
  /// Frees the slots of processes that are gone; returns how many.
  int reap_dead_clients();
  /// Polls until `stop` is set, sleeping on the doorbell when idle.
  void run(const std::atomic<bool>& stop);
  /// When the view changes without any event (a best-effort kernel reaches
  /// its release-ahead point) while a launch is held; 0 when it will not.
  std::int64_t next_deadline_ns(std::int64_t now) const;

  /// Statistics per command, in config order.
  const std::vector<LiveClientStats>& stats() const { return stats_; }

 private:
  struct InFlight {
    LaunchEntry* entry;
    SimKernel kernel;
    std::size_t index;
    bool best_effort_outstanding;      ///< counted in be_outstanding_*
    std::int64_t expected_end_ns = 0;  ///< best effort: when it should finish (queued behind earlier BE work)
  };
  struct Held {
    LaunchEntry* entry;
    SimKernel kernel;
    bool denied = false;
  };
  struct SlotTrack {
    bool active = false;
    std::uint32_t generation = 0;
    int pid = 0;
    int client = -1;
    std::uint64_t tail = 0;
    std::deque<Held> held;
    std::vector<InFlight> in_flight;
    std::size_t index_in_request = 0;
    bool in_request = false;
    bool aged = false;  // a launch of it waited max_be_wait_us: the rest of its request goes unchecked
    std::int64_t request_begin_ns = 0;
    std::unordered_map<std::uint64_t, SimKernel> kernel_cache;
  };

  bool consume_new(int slot_index);
  bool collect_completions(int slot_index);
  bool decide();
  /// A best-effort slot whose oldest held launch has waited max_be_wait_us.
  bool held_too_long(const SlotTrack& t, std::int64_t now) const;
  bool best_effort_held_too_long(std::int64_t now) const;
  /// What the policy sees; with `lead`, BE kernels due within the
  /// release-ahead lead count as finished.
  SchedulerView view(std::int64_t now, bool lead = true) const;
  SimKernel lookup(int slot_index, const LaunchEntry& e);
  void release(int slot_index, Held h, std::int64_t now, bool ahead);
  void finish(int slot_index, const InFlight& f);
  void drop_slot(int slot_index, const char* why);
  std::size_t request_length(int client) const;
  bool hp_request_active() const;
  void log_event(const char* format, ...);

  SegmentHeader* segment_;
  LiveConfig config_;
  std::unique_ptr<Policy> policy_;
  std::FILE* log_ = nullptr;
  std::vector<std::vector<SimKernel>> profile_kernels_;                                   // per client, profile order
  std::vector<std::unordered_map<std::string, std::vector<std::size_t>>> profile_index_;  // name key -> records
  std::vector<double> median_duration_us_;
  std::vector<LiveClientStats> stats_;
  std::vector<SlotTrack> slots_;
  int hp_client_ = -1;
  double hp_request_solo_us_ = 0;
  SimKernel hp_current_;
  bool hp_seen_ = false;
  const LaunchEntry* hp_current_entry_ = nullptr;
  bool hp_current_done_ = true;
  int hp_in_flight_ = 0;
  bool hp_active_logged_ = false;  // the HP state the log last recorded (hp_active events)
  double be_outstanding_us_ = 0;
  int be_outstanding_kernels_ = 0;
  std::int64_t be_expected_end_ns_ = 0;  // when all released BE work should have finished
  std::int64_t release_ahead_ns_ = 0;
  int exclusive_owner_ = -1;  // temporal sharing: the client that holds the GPU
  std::int64_t start_ns_ = 0;
};

}  // namespace fleet::orion::live
