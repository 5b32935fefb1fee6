// The client side of the protocol (docs/orion-live.md), without CUDA: the
// interposer calls it around every intercepted launch. Connects lazily to
// the segment named in $ORION_SEGMENT; a process started without one, or
// whose scheduler has gone, runs ungated. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "orion/live/shm_segment.h"

namespace fleet::orion::live {

/// Geometry of one launch as the interposer sees it.
struct LaunchGeometry {
  std::uint64_t grid_blocks = 1;
  std::uint32_t block_threads = 1;
  std::uint32_t shared_bytes = 0;
};

/// One process's connection to the scheduler.
class ClientGate {
 public:
  /// Not connected: every call is a pass-through until connect().
  ClientGate() = default;
  ClientGate(const ClientGate&) = delete;
  ClientGate& operator=(const ClientGate&) = delete;

  /// Connects from the environment (ORION_SEGMENT, ORION_CLIENT, ORION_ROLE)
  /// once; later calls return the result of the first. False: run ungated.
  bool connect_from_environment();
  /// Connects to an already mapped segment as `client` in `role` (tests).
  bool connect(SegmentHeader* segment, int client, ClientRole role);
  /// Forgets the connection without touching the segment (after fork()).
  void forget();
  /// The process exits normally: marks its slot so (launches still in flight are not lost work).
  void leave();

  /// True while launches go through the scheduler.
  bool gated() const { return slot_ != nullptr && !ungated_.load(std::memory_order_relaxed); }
  /// True when HP streams should get the highest priority.
  bool boost_streams() const;

  /// Index of a kernel name key in the slot's table (published on first use).
  std::uint32_t intern_name(std::string_view key);

  /// Before launching: claims an entry and, when this client must wait,
  /// blocks until the scheduler releases it (or is found dead: then returns
  /// null and the process runs ungated). Null when ungated.
  LaunchEntry* before_launch(std::uint32_t name_index, const LaunchGeometry& geometry);
  /// After the driver call returned: publishes the launch (`ok` false: it
  /// failed and counts as completed at once).
  void after_launch(LaunchEntry* entry, bool ok);
  /// The GPU finished the launch.
  void completed(LaunchEntry* entry);
  /// An HP launch inside a marked request need not be tracked with an
  /// event: the request's end marker reports it complete (the request ends
  /// there). True when `entry` is taken so; false: track it (a BE launch, a
  /// launch outside a request, or kMaxDeferred launches already waiting).
  bool defer_completion(LaunchEntry* entry);
  /// Posts a request begin/end marker; an end marker first reports the
  /// deferred launches complete.
  void marker(EntryKind kind);

  /// Launches deferred at most per request (well inside the ring, whose
  /// entries are freed only once complete).
  static constexpr std::size_t kMaxDeferred = kRingEntries / 4;

 private:
  LaunchEntry* claim_entry();
  bool must_wait() const;
  bool scheduler_alive();
  void ring_doorbell();
  void go_ungated(const char* why);
  /// Waits while entry->state == value; false when the scheduler died meanwhile.
  bool wait_while(std::atomic<std::uint32_t>& word, std::uint32_t value);

  SegmentHeader* segment_ = nullptr;
  ClientSlot* slot_ = nullptr;
  Segment mapping_;
  ClientRole role_ = kRoleBestEffort;
  std::atomic<bool> ungated_{false};
  std::once_flag connect_once_;
  std::mutex deferred_mutex_;
  bool in_request_ = false;             ///< between a begin and an end marker (guarded by deferred_mutex_)
  std::vector<LaunchEntry*> deferred_;  ///< HP launches the next end marker completes
  std::mutex names_mutex_;
  std::unordered_map<std::string, std::uint32_t> names_;
};

}  // namespace fleet::orion::live
