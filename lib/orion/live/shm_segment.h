// Creating and mapping the shared segment of shm_layout.h, plus the futex
// wake-ups both sides use. No dependencies beyond libc: this code also goes
// into the interposer library that is loaded into client programs.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "orion/live/shm_layout.h"

namespace fleet::orion::live {

/// A mapped segment; unmaps (and, for the creator, removes the file) on destruction.
class Segment {
 public:
  /// Creates a new segment file at `path` (must not exist), sized and initialised.
  /// Throws std::runtime_error with the reason.
  static Segment create(const std::string& path);
  /// Maps an existing segment; throws std::runtime_error if it is missing,
  /// too small, or of another version.
  static Segment open(const std::string& path);
  /// A segment in private memory (tests).
  static Segment in_memory();

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  SegmentHeader* header() const { return header_; }
  const std::string& path() const { return path_; }

 private:
  SegmentHeader* header_ = nullptr;
  std::string path_;
  bool owner_ = false;
  bool mapped_ = false;  ///< false: heap memory (in_memory)
};

/// Sleeps while `*word == expected`, at most `timeout_ns` (cross-process futex).
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::int64_t timeout_ns);
/// Wakes up to `count` sleepers on `word`.
void futex_wake(std::atomic<std::uint32_t>* word, int count);
/// CLOCK_MONOTONIC in nanoseconds (same clock in every process of the machine).
std::int64_t monotonic_ns();
/// Whether process `pid` still runs (false when it is gone or a zombie).
bool process_alive(int pid);
/// Resets every field of a slot to its initial state (the scheduler, recycling it).
void reset_slot(ClientSlot& slot);

}  // namespace fleet::orion::live
