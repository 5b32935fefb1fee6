// The shared-memory segment through which `orion-run exec` (the scheduler)
// and the interposer inside each client process talk. docs/orion-live.md
// describes the protocol; this header is its single definition.
//
// One file under /dev/shm, created by the scheduler and mapped by every
// client. Each client process claims a slot; a slot holds a ring of launch
// entries that only that process writes (many threads may), and only the
// scheduler consumes. Every field either side reads while the other writes is
// a lock-free std::atomic, so the layout works across processes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fleet::orion::live {

inline constexpr std::uint32_t kSegmentMagic = 0x4f52494fu;  // "ORIO"
inline constexpr std::uint32_t kSegmentVersion = 1;
inline constexpr int kMaxSlots = 16;                 ///< client processes at once
inline constexpr std::uint32_t kRingEntries = 1024;  ///< launches in flight per process
inline constexpr std::uint32_t kMaxNames = 2048;     ///< distinct kernels per process
inline constexpr std::size_t kNameBytes = 256;       ///< kernel name key, NUL-terminated, truncated

/// Life of one ring entry. Transitions:
///  client: kFree -> kPosted (waits for the scheduler) or kLaunched (already on the GPU) or kMarker
///  scheduler: kPosted -> kReleased;  client: kReleased/kLaunched -> kCompleted
///  scheduler: kCompleted/kMarker -> kFree (after accounting for it)
enum EntryState : std::uint32_t {
  kFree = 0,
  kPosted = 1,
  kReleased = 2,
  kLaunched = 3,
  kCompleted = 4,
  kMarker = 5,
};

/// What an entry describes.
enum EntryKind : std::uint32_t {
  kKernel = 0,
  kRequestBegin = 1,  ///< cuProfilerStart: a request/iteration starts
  kRequestEnd = 2,    ///< cuProfilerStop: it ends
};

/// One launch (or marker). 64 bytes: one cache line.
struct LaunchEntry {
  std::atomic<std::uint32_t> state{kFree};  ///< EntryState; also the futex word a held launch sleeps on
  std::uint32_t kind = kKernel;
  std::uint64_t ticket = 0;      ///< position in the slot's sequence (ring index = ticket % kRingEntries)
  std::uint32_t name_index = 0;  ///< into the slot's name table
  std::uint32_t block_threads = 0;
  std::uint64_t grid_blocks = 0;
  std::uint32_t shared_bytes = 0;  ///< dynamic shared memory of the launch
  std::uint32_t reserved = 0;
  std::int64_t post_ns = 0;      ///< CLOCK_MONOTONIC when the client called the launch / marker
  std::int64_t release_ns = 0;   ///< when the scheduler released it (held launches)
  std::int64_t complete_ns = 0;  ///< when the client saw it complete
};
static_assert(sizeof(LaunchEntry) == 64, "one cache line per entry");

/// Roles a client process plays.
enum ClientRole : std::uint32_t { kRoleHighPriority = 0, kRoleBestEffort = 1 };

/// Slot states.
enum SlotState : std::uint32_t { kSlotFree = 0, kSlotClaimed = 1, kSlotActive = 2 };

/// One client process.
struct alignas(64) ClientSlot {
  std::atomic<std::uint32_t> state{kSlotFree};
  std::atomic<std::int32_t> pid{0};
  std::int32_t client = -1;  ///< index of the command (policy client number)
  std::uint32_t role = kRoleBestEffort;
  std::atomic<std::uint64_t> next_ticket{0};  ///< claimed by the client's threads with fetch_add
  std::atomic<std::uint32_t> name_count{0};   ///< names published so far
  std::atomic<std::uint32_t> generation{0};   ///< bumped when the scheduler recycles the slot
  std::atomic<std::uint32_t> exited{0};       ///< 1: the process is exiting normally (not killed)
  alignas(64) LaunchEntry ring[kRingEntries];
  char names[kMaxNames][kNameBytes];
};

/// The whole segment.
struct alignas(64) SegmentHeader {
  std::uint32_t magic = 0;
  std::uint32_t version = 0;
  std::atomic<std::int32_t> scheduler_pid{0};
  std::uint32_t hp_waits = 0;                          ///< 1: the policy gates the HP client too (temporal sharing)
  std::uint32_t boost_hp_streams = 0;                  ///< 1: HP streams get the highest priority
  std::int32_t client_count = 0;                       ///< commands started
  alignas(64) std::atomic<std::uint32_t> doorbell{0};  ///< bumped by clients; the scheduler's futex word
  std::atomic<std::uint32_t> scheduler_sleeping{0};    ///< 1 while the scheduler waits on the doorbell
  std::atomic<std::uint32_t> shutting_down{0};         ///< 1: clients go ungated from now on
  ClientSlot slots[kMaxSlots];
};

/// Bytes of the segment file.
inline constexpr std::size_t kSegmentBytes = sizeof(SegmentHeader);

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "cross-process atomics must be lock-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "cross-process atomics must be lock-free");

/// Environment variables the scheduler sets for its clients.
inline constexpr const char* kEnvSegment = "ORION_SEGMENT";  ///< path of the segment file
inline constexpr const char* kEnvClient = "ORION_CLIENT";    ///< command index
inline constexpr const char* kEnvRole = "ORION_ROLE";        ///< "hp" or "be"
inline constexpr const char* kEnvQuiet = "ORION_QUIET";      ///< "1": no notices on stderr

}  // namespace fleet::orion::live
