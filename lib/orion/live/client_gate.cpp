#include "orion/live/client_gate.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace fleet::orion::live {

namespace {

constexpr int kSpinsBeforeSleep = 2000;
constexpr std::int64_t kSleepSliceNs = 2'000'000;  // re-check the scheduler this often while waiting

bool quiet() {
  const char* q = std::getenv(kEnvQuiet);
  return q != nullptr && std::strcmp(q, "1") == 0;
}

void notice(const char* text) {
  if (!quiet()) std::fprintf(stderr, "orion: %s\n", text);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

bool ClientGate::connect_from_environment() {
  std::call_once(connect_once_, [this] {
    const char* path = std::getenv(kEnvSegment);
    if (path == nullptr || *path == '\0') return;  // not started by orion-run exec: pass-through
    const char* client = std::getenv(kEnvClient);
    const char* role = std::getenv(kEnvRole);
    try {
      mapping_ = Segment::open(path);
    } catch (const std::exception& e) {
      char text[512];
      std::snprintf(text, sizeof text, "%s; running ungated", e.what());
      notice(text);
      return;
    }
    const bool hp = role != nullptr && std::strcmp(role, "hp") == 0;
    connect(mapping_.header(), client ? std::atoi(client) : 0, hp ? kRoleHighPriority : kRoleBestEffort);
  });
  return gated();
}

bool ClientGate::connect(SegmentHeader* segment, int client, ClientRole role) {
  segment_ = segment;
  role_ = role;
  if (segment->shutting_down.load() != 0 || !process_alive(segment->scheduler_pid.load())) {
    go_ungated("the scheduler is not running");
    return false;
  }
  for (ClientSlot& slot : segment->slots) {
    std::uint32_t expected = kSlotFree;
    if (!slot.state.compare_exchange_strong(expected, kSlotClaimed)) continue;
    slot.client = client;
    slot.role = role;
    slot.pid.store(static_cast<std::int32_t>(getpid()));
    slot.state.store(kSlotActive, std::memory_order_release);
    slot_ = &slot;
    ring_doorbell();
    return true;
  }
  go_ungated("no free client slot in the scheduler segment");
  return false;
}

void ClientGate::forget() {
  slot_ = nullptr;
  segment_ = nullptr;
  ungated_.store(true);
}

void ClientGate::leave() {
  if (slot_ == nullptr) return;
  slot_->exited.store(1, std::memory_order_release);
  if (!ungated_.load()) ring_doorbell();
}

bool ClientGate::boost_streams() const {
  return gated() && role_ == kRoleHighPriority && segment_->boost_hp_streams != 0;
}

bool ClientGate::must_wait() const { return role_ == kRoleBestEffort || segment_->hp_waits != 0; }

bool ClientGate::scheduler_alive() {
  if (segment_->shutting_down.load(std::memory_order_acquire) != 0) return false;
  return process_alive(segment_->scheduler_pid.load(std::memory_order_relaxed));
}

void ClientGate::go_ungated(const char* why) {
  bool expected = false;
  if (!ungated_.compare_exchange_strong(expected, true)) return;
  char text[256];
  std::snprintf(text, sizeof text, "%s; running ungated from now on", why);
  notice(text);
}

void ClientGate::ring_doorbell() {
  // seq_cst pairs with the scheduler's store to scheduler_sleeping: either it
  // sees our entry in its last poll, or we see it asleep and wake it.
  segment_->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (segment_->scheduler_sleeping.load(std::memory_order_seq_cst) != 0) futex_wake(&segment_->doorbell, 1);
}

bool ClientGate::wait_while(std::atomic<std::uint32_t>& word, std::uint32_t value) {
  for (int i = 0; i < kSpinsBeforeSleep; ++i) {
    if (word.load(std::memory_order_acquire) != value) return true;
    cpu_relax();
  }
  while (word.load(std::memory_order_acquire) == value) {
    futex_wait(&word, value, kSleepSliceNs);
    if (word.load(std::memory_order_acquire) != value) return true;
    if (!scheduler_alive()) {
      go_ungated("the scheduler is gone");
      return false;
    }
  }
  return true;
}

std::uint32_t ClientGate::intern_name(std::string_view key) {
  if (slot_ == nullptr) return 0;
  std::lock_guard<std::mutex> lock(names_mutex_);
  const std::string k(key);
  auto it = names_.find(k);
  if (it != names_.end()) return it->second;
  const std::uint32_t index = slot_->name_count.load(std::memory_order_relaxed);
  if (index >= kMaxNames) return kMaxNames - 1;  // table full: the last name stands for the rest
  std::snprintf(slot_->names[index], kNameBytes, "%s", k.c_str());
  slot_->name_count.store(index + 1, std::memory_order_release);
  names_.emplace(k, index);
  return index;
}

LaunchEntry* ClientGate::claim_entry() {
  const std::uint64_t ticket = slot_->next_ticket.fetch_add(1, std::memory_order_relaxed);
  LaunchEntry& e = slot_->ring[ticket % kRingEntries];
  // The ring is full while the entry's previous use is in flight: wait for the
  // scheduler to recycle it (the GPU finishing older launches).
  while (e.state.load(std::memory_order_acquire) != kFree) {
    if (!wait_while(e.state, e.state.load(std::memory_order_acquire))) return nullptr;
  }
  e.ticket = ticket;
  return &e;
}

LaunchEntry* ClientGate::before_launch(std::uint32_t name_index, const LaunchGeometry& geometry) {
  if (!gated()) return nullptr;
  LaunchEntry* e = claim_entry();
  if (e == nullptr) return nullptr;
  e->kind = kKernel;
  e->name_index = name_index;
  e->grid_blocks = geometry.grid_blocks;
  e->block_threads = geometry.block_threads;
  e->shared_bytes = geometry.shared_bytes;
  e->post_ns = monotonic_ns();
  e->release_ns = 0;
  e->complete_ns = 0;
  if (!must_wait()) return e;  // published after the launch: an HP launch never waits for the scheduler
  e->state.store(kPosted, std::memory_order_release);
  ring_doorbell();
  if (!wait_while(e->state, kPosted)) return nullptr;
  return e;
}

void ClientGate::after_launch(LaunchEntry* entry, bool ok) {
  if (entry == nullptr) return;
  if (!ok) {
    completed(entry);
    return;
  }
  if (!must_wait()) {
    entry->state.store(kLaunched, std::memory_order_release);
    ring_doorbell();
  }
}

void ClientGate::completed(LaunchEntry* entry) {
  if (entry == nullptr) return;
  entry->complete_ns = monotonic_ns();
  entry->state.store(kCompleted, std::memory_order_release);
  if (slot_ != nullptr) ring_doorbell();
}

bool ClientGate::defer_completion(LaunchEntry* entry) {
  if (entry == nullptr || role_ != kRoleHighPriority) return false;
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  if (!in_request_ || deferred_.size() >= kMaxDeferred) return false;
  deferred_.push_back(entry);
  return true;
}

void ClientGate::marker(EntryKind kind) {
  if (!gated()) return;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    in_request_ = kind == kRequestBegin;
    if (kind == kRequestEnd && !deferred_.empty()) {
      // The request is over, so are its launches (a client synchronises
      // before its end marker, as one that measures the request must).
      const std::int64_t now = monotonic_ns();
      for (LaunchEntry* d : deferred_) {
        d->complete_ns = now;
        d->state.store(kCompleted, std::memory_order_release);
      }
      deferred_.clear();
    }
  }
  LaunchEntry* e = claim_entry();
  if (e == nullptr) return;
  e->kind = kind;
  e->post_ns = monotonic_ns();
  e->state.store(kMarker, std::memory_order_release);
  ring_doorbell();
}

}  // namespace fleet::orion::live
