#include "orion/live/live_scheduler.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstring>

#include "common/error.h"
#include "orion/kernel_name.h"
#include "orion/live/shm_segment.h"
#include "orion/occupancy.h"
#include "orion/workload.h"

namespace fleet::orion::live {

namespace {

constexpr int kIdleSpins = 200;
constexpr std::int64_t kIdleSleepNs = 2'000'000;
constexpr std::int64_t kReapEveryNs = 5'000'000;

Workload policy_workload(const LiveConfig& config) {
  Workload w;
  w.device = config.device;
  for (const LiveClient& c : config.clients) {
    ClientSpec spec;
    spec.name = c.name;
    spec.high_priority = c.high_priority;
    spec.training = c.training;
    if (c.profile) spec.kernels = to_sim_kernels(*c.profile, config.device);
    w.clients.push_back(std::move(spec));
  }
  return w;
}

std::uint64_t geometry_key(std::uint32_t name_index, const LaunchEntry& e) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t v :
       {std::uint64_t{name_index}, e.grid_blocks, std::uint64_t{e.block_threads}, std::uint64_t{e.shared_bytes}}) {
    h = (h ^ v) * 1099511628211ull;
  }
  return h;
}

}  // namespace

LiveScheduler::LiveScheduler(SegmentHeader* segment, LiveConfig config)
    : segment_(segment), config_(std::move(config)), slots_(kMaxSlots) {
  const Workload workload = policy_workload(config_);
  if (config_.policy == "tick-tock") {
    for (const LiveClient& c : config_.clients) {
      if (!c.profile) throw InputError("tick-tock needs a profile for every client (it splits iterations in halves)");
    }
  }
  policy_ = make_policy(config_.policy, workload, config_.policy_options, config_.contention);
  for (std::size_t i = 0; i < config_.clients.size(); ++i) {
    const LiveClient& c = config_.clients[i];
    if (c.high_priority) {
      if (hp_client_ >= 0) throw InputError("only one high-priority client is supported");
      hp_client_ = static_cast<int>(i);
    }
    profile_kernels_.push_back(workload.clients[i].kernels);
    std::unordered_map<std::string, std::vector<std::size_t>> index;
    std::vector<double> durations;
    if (c.profile) {
      for (std::size_t k = 0; k < c.profile->kernels.size(); ++k) {
        index[kernel_name_key(c.profile->kernels[k].name)].push_back(k);
        durations.push_back(workload.clients[i].kernels[k].duration_us);
      }
    }
    double median = 0;
    if (!durations.empty()) {
      std::nth_element(durations.begin(), durations.begin() + static_cast<long>(durations.size() / 2), durations.end());
      median = durations[durations.size() / 2];
    }
    profile_index_.push_back(std::move(index));
    median_duration_us_.push_back(median);
    LiveClientStats s;
    s.name = c.name;
    s.high_priority = c.high_priority;
    stats_.push_back(std::move(s));
    if (c.high_priority) {
      for (const SimKernel& k : workload.clients[i].kernels) hp_request_solo_us_ += k.duration_us;
    }
  }
  segment_->hp_waits = policy_->exclusive_requests() ? 1 : 0;
  segment_->boost_hp_streams = policy_->priority_streams() ? 1 : 0;
  segment_->client_count = static_cast<std::int32_t>(config_.clients.size());
  release_ahead_ns_ = static_cast<std::int64_t>(std::llround(std::max(0.0, config_.release_ahead_us) * 1e3));
  start_ns_ = monotonic_ns();
}

void LiveScheduler::set_log(std::FILE* log) {
  log_ = log;
  log_event(R"({"t_us":%.1f,"event":"start","policy":"%s","clients":%zu})", (monotonic_ns() - start_ns_) / 1e3,
            std::string(policy_->name()).c_str(), config_.clients.size());
}

LiveScheduler::~LiveScheduler() = default;

void LiveScheduler::log_event(const char* format, ...) {
  if (log_ == nullptr) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(log_, format, args);
  va_end(args);
  std::fputc('\n', log_);
}

std::size_t LiveScheduler::request_length(int client) const {
  return profile_kernels_[static_cast<std::size_t>(client)].size();
}

bool LiveScheduler::hp_request_active() const {
  if (hp_in_flight_ > 0) return true;
  for (const SlotTrack& t : slots_) {
    if (t.active && t.client == hp_client_ && t.in_request) return true;
  }
  return false;
}

SchedulerView LiveScheduler::view(std::int64_t now, bool lead) const {
  SchedulerView v;
  v.device_sms = config_.device.sm_count;
  v.hp_client = hp_client_;
  v.hp_request_active = hp_request_active();
  v.hp_current = hp_seen_ ? &hp_current_ : nullptr;
  v.hp_current_done = hp_current_done_;
  v.be_outstanding_us = be_outstanding_us_;
  v.be_outstanding_kernels = be_outstanding_kernels_;
  v.hp_request_solo_us = hp_request_solo_us_;
  v.now_us = static_cast<double>(now) / 1e3;
  for (const SlotTrack& t : slots_) {
    if (!t.active || t.client != hp_client_ || !t.in_request) continue;
    // Its launches so far, less those still held or on the GPU.
    v.hp_request_start_us = static_cast<double>(t.request_begin_ns) / 1e3;
    const std::size_t pending = t.in_flight.size() + t.held.size();
    v.hp_kernels_done = t.index_in_request > pending ? t.index_in_request - pending : 0;
    // Its kernels report their completions through the request's end marker only.
    v.hp_progress_known = false;
    break;
  }
  if (lead && release_ahead_ns_ > 0 && be_outstanding_kernels_ > 0) {
    // Best-effort kernels due to finish within the hand-off count as done,
    // as long as none has overrun its profile by more than that (then the
    // profile does not describe this run, and completions decide again).
    int still_running = 0;
    bool overrun = false;
    for (const SlotTrack& t : slots_) {
      if (!t.active || t.client == hp_client_) continue;
      for (const InFlight& f : t.in_flight) {
        if (!f.best_effort_outstanding) continue;
        if (now > f.expected_end_ns + release_ahead_ns_) overrun = true;
        if (f.expected_end_ns > now + release_ahead_ns_) ++still_running;
      }
    }
    if (!overrun) {
      v.be_outstanding_kernels = still_running;
      v.be_outstanding_us = still_running > 0 ? static_cast<double>(be_expected_end_ns_ - now) / 1e3 : 0.0;
    }
  }
  return v;
}

std::int64_t LiveScheduler::next_deadline_ns(std::int64_t now) const {
  if (release_ahead_ns_ <= 0 || be_outstanding_kernels_ == 0) return 0;
  bool holding = false;
  for (const SlotTrack& t : slots_) holding |= t.active && !t.held.empty();
  if (!holding) return 0;
  std::int64_t next = 0;
  for (const SlotTrack& t : slots_) {
    if (!t.active || t.client == hp_client_) continue;
    for (const InFlight& f : t.in_flight) {
      const std::int64_t at = f.expected_end_ns - release_ahead_ns_;
      if (f.best_effort_outstanding && at > now && (next == 0 || at < next)) next = at;
    }
  }
  return next;
}

SimKernel LiveScheduler::lookup(int slot_index, const LaunchEntry& e) {
  SlotTrack& t = slots_[static_cast<std::size_t>(slot_index)];
  const std::uint64_t key = geometry_key(e.name_index, e);
  auto cached = t.kernel_cache.find(key);
  if (cached != t.kernel_cache.end()) return cached->second;

  const ClientSlot& slot = segment_->slots[slot_index];
  std::string name;
  if (e.name_index < slot.name_count.load(std::memory_order_acquire)) {
    name.assign(slot.names[e.name_index], strnlen(slot.names[e.name_index], kNameBytes));
  }
  const std::size_t client = static_cast<std::size_t>(t.client);
  SimKernel k;
  bool matched = false;
  auto it = profile_index_[client].find(name);
  if (it != profile_index_[client].end()) {
    const KernelProfile& profile = *config_.clients[client].profile;
    std::size_t chosen = it->second.front();
    for (std::size_t r : it->second) {
      if (static_cast<std::uint64_t>(profile.kernels[r].grid_blocks) == e.grid_blocks) {
        chosen = r;
        break;
      }
    }
    k = profile_kernels_[client][chosen];
    matched = true;
  }
  if (!matched) {
    // Not in the profile: SMs from the launch geometry (no register limit
    // known), the profile's median duration, class unknown.
    LaunchConfig launch;
    launch.grid_blocks = static_cast<std::int64_t>(std::max<std::uint64_t>(1, e.grid_blocks));
    launch.threads_per_block = static_cast<int>(std::max<std::uint32_t>(1, e.block_threads));
    launch.dynamic_shared_bytes = e.shared_bytes;
    try {
      k.sm_usage = compute_occupancy(launch, config_.device).sms_needed;
    } catch (const Error&) {
      k.sm_usage = config_.device.sm_count;
    }
    k.sm_need = static_cast<int>(std::clamp<std::int64_t>(k.sm_usage, 1, config_.device.sm_count));
    k.duration_us = median_duration_us_[client];
    k.cls = KernelClass::kUnknown;
    stats_[client].unmatched++;
  }
  t.kernel_cache.emplace(key, k);
  return k;
}

bool LiveScheduler::consume_new(int slot_index) {
  ClientSlot& slot = segment_->slots[slot_index];
  SlotTrack& t = slots_[static_cast<std::size_t>(slot_index)];
  if (!t.active) {
    if (slot.state.load(std::memory_order_acquire) != kSlotActive) return false;
    t = SlotTrack{};
    t.active = true;
    t.generation = slot.generation.load();
    t.pid = slot.pid.load();
    t.client = std::clamp(slot.client, 0, static_cast<int>(config_.clients.size()) - 1);
    LiveClientStats& s = stats_[static_cast<std::size_t>(t.client)];
    s.processes++;
    log_event(R"({"t_us":%.1f,"event":"join","client":"%s","pid":%d,"slot":%d})", (monotonic_ns() - start_ns_) / 1e3,
              s.name.c_str(), t.pid, slot_index);
  }
  bool progress = false;
  LiveClientStats& s = stats_[static_cast<std::size_t>(t.client)];
  for (;;) {
    LaunchEntry& e = slot.ring[t.tail % kRingEntries];
    const std::uint32_t state = e.state.load(std::memory_order_acquire);
    if (state == kFree || e.ticket != t.tail) break;
    // Temporal sharing: a client that owns the GPU and has just ended a
    // request does not begin the next one in the same pass. Its begin marker
    // waits until decide() has run, so that the GPU, once the owner's
    // kernels are done, goes to a waiting HP launch first rather than to the
    // owner's next request (read together, the two markers would keep the
    // owner mid-request for as long as it has work); an HP owner waits so
    // only for a best-effort launch held max_be_wait_us.
    if (state == kMarker && e.kind == kRequestBegin && !t.in_request && policy_->exclusive_requests() &&
        exclusive_owner_ == t.client && (t.client != hp_client_ || best_effort_held_too_long(monotonic_ns()))) {
      break;
    }
    ++t.tail;
    progress = true;
    if (s.first_ns == 0 || e.post_ns < s.first_ns) s.first_ns = e.post_ns;  // a command's processes post apart
    s.last_ns = std::max(s.last_ns, e.post_ns);
    if (state == kMarker) {
      if (e.kind == kRequestBegin) {
        t.in_request = true;
        t.index_in_request = 0;
        t.request_begin_ns = e.post_ns;
      } else if (e.kind == kRequestEnd && t.in_request) {
        t.in_request = false;
        t.aged = false;
        s.requests++;
        s.latencies_ms.push_back((e.post_ns - t.request_begin_ns) / 1e6);
        s.request_end_ns.push_back(e.post_ns);
        policy_->on_request_done(t.client, (e.post_ns - t.request_begin_ns) / 1e3);
        log_event(R"({"t_us":%.1f,"event":"request","client":"%s","latency_ms":%.3f})", (e.post_ns - start_ns_) / 1e3,
                  s.name.c_str(), (e.post_ns - t.request_begin_ns) / 1e6);
      }
      e.state.store(kFree, std::memory_order_release);
      futex_wake(&e.state, 1);
      continue;
    }
    s.kernels++;
    const SimKernel k = lookup(slot_index, e);
    if (state == kPosted) {
      t.held.push_back(Held{&e, k});
      continue;
    }
    // Launched without asking (the HP client) or already completed.
    const std::size_t index = t.index_in_request++;
    if (t.client == hp_client_) {
      hp_current_ = k;
      hp_seen_ = true;
      hp_current_entry_ = &e;
      hp_current_done_ = false;
      hp_in_flight_++;
    }
    log_event(R"({"t_us":%.1f,"event":"launch","client":"%s","sm":%lld,"dur_us":%.1f})", (e.post_ns - start_ns_) / 1e3,
              s.name.c_str(), static_cast<long long>(k.sm_usage), k.duration_us);
    t.in_flight.push_back(InFlight{&e, k, index, false});
  }
  return progress;
}

void LiveScheduler::finish(int slot_index, const InFlight& f) {
  SlotTrack& t = slots_[static_cast<std::size_t>(slot_index)];
  const std::size_t count = request_length(t.client);
  policy_->on_complete(t.client, count > 0 ? f.index % count : f.index, count);
  if (t.client == hp_client_) {
    hp_in_flight_--;
    if (f.entry == hp_current_entry_) hp_current_done_ = true;
  } else if (f.best_effort_outstanding) {
    be_outstanding_us_ -= f.kernel.duration_us;
    be_outstanding_kernels_--;
    if (be_outstanding_kernels_ <= 0) {
      be_outstanding_kernels_ = 0;
      be_outstanding_us_ = 0;
      be_expected_end_ns_ = 0;
    }
  }
}

bool LiveScheduler::collect_completions(int slot_index) {
  SlotTrack& t = slots_[static_cast<std::size_t>(slot_index)];
  bool progress = false;
  for (std::size_t i = 0; i < t.in_flight.size();) {
    InFlight& f = t.in_flight[i];
    if (f.entry->state.load(std::memory_order_acquire) != kCompleted) {
      ++i;
      continue;
    }
    finish(slot_index, f);
    if (t.client != hp_client_) {
      // When the client saw it finish (its completion thread), not when the scheduler did.
      log_event(R"({"t_us":%.1f,"event":"complete","client":"%s","dur_us":%.1f,"seen_after_us":%.1f})",
                (f.entry->complete_ns - start_ns_) / 1e3, stats_[static_cast<std::size_t>(t.client)].name.c_str(),
                f.kernel.duration_us, (monotonic_ns() - f.entry->complete_ns) / 1e3);
    }
    f.entry->state.store(kFree, std::memory_order_release);
    futex_wake(&f.entry->state, 1);  // a client may wait for this ring entry
    t.in_flight[i] = t.in_flight.back();
    t.in_flight.pop_back();
    progress = true;
  }
  return progress;
}

void LiveScheduler::release(int slot_index, Held h, std::int64_t now, bool ahead) {
  SlotTrack& t = slots_[static_cast<std::size_t>(slot_index)];
  LiveClientStats& s = stats_[static_cast<std::size_t>(t.client)];
  const std::size_t index = t.index_in_request++;
  if (t.client == hp_client_) {
    hp_current_ = h.kernel;
    hp_seen_ = true;
    hp_current_entry_ = h.entry;
    hp_current_done_ = false;
    hp_in_flight_++;
  }
  std::int64_t expected_end_ns = 0;
  if (t.client != hp_client_) {
    be_outstanding_us_ += h.kernel.duration_us;
    be_outstanding_kernels_++;
    // It starts when the BE work released before it should have finished (one queue on the GPU).
    expected_end_ns = std::max(now, be_expected_end_ns_) + std::llround(h.kernel.duration_us * 1e3);
    be_expected_end_ns_ = expected_end_ns;
  }
  if (h.denied) s.held++;
  if (ahead) s.released_ahead++;
  const double waited_ms = (now - h.entry->post_ns) / 1e6;
  s.held_ms += std::max(0.0, waited_ms);
  log_event(R"({"t_us":%.1f,"event":"release","client":"%s","sm":%lld,"dur_us":%.1f,"wait_us":%.1f,"ahead":%s})",
            (now - start_ns_) / 1e3, s.name.c_str(), static_cast<long long>(h.kernel.sm_usage), h.kernel.duration_us,
            waited_ms * 1e3, ahead ? "true" : "false");
  t.in_flight.push_back(InFlight{h.entry, h.kernel, index, t.client != hp_client_, expected_end_ns});
  h.entry->release_ns = now;
  h.entry->state.store(kReleased, std::memory_order_release);
  futex_wake(&h.entry->state, 1);
}

bool LiveScheduler::held_too_long(const SlotTrack& t, std::int64_t now) const {
  const auto max_wait_ns = static_cast<std::int64_t>(std::llround(std::max(0.0, config_.max_be_wait_us) * 1e3));
  return max_wait_ns > 0 && hp_client_ >= 0 && t.active && t.client != hp_client_ && !t.held.empty() &&
         now - t.held.front().entry->post_ns >= max_wait_ns;
}

bool LiveScheduler::best_effort_held_too_long(std::int64_t now) const {
  return std::any_of(slots_.begin(), slots_.end(), [&](const SlotTrack& t) { return held_too_long(t, now); });
}

bool LiveScheduler::decide() {
  bool progress = false;
  if (policy_->exclusive_requests() && exclusive_owner_ >= 0) {
    // The owner keeps the GPU while a request is open or its kernels run.
    bool busy = false;
    for (const SlotTrack& t : slots_) {
      if (t.active && t.client == exclusive_owner_ && (t.in_request || !t.in_flight.empty())) busy = true;
    }
    if (!busy) exclusive_owner_ = -1;
  }
  const std::int64_t now = monotonic_ns();
  auto waited_too_long = [&](const SlotTrack& t) { return held_too_long(t, now); };
  // The HP client's held launches first (only temporal sharing holds them),
  // then the others; a best-effort launch held too long goes first.
  const bool be_first = best_effort_held_too_long(now);
  for (int pass = 0; pass < 2; ++pass) {
    const bool hp_pass = (pass == 0) != be_first;
    for (int si = 0; si < kMaxSlots; ++si) {
      SlotTrack& t = slots_[static_cast<std::size_t>(si)];
      if (!t.active || (t.client == hp_client_) != hp_pass) continue;
      while (!t.held.empty()) {
        Held& h = t.held.front();
        const bool forced = !t.aged && waited_too_long(t);
        if (forced) {
          t.aged = true;
          stats_[static_cast<std::size_t>(t.client)].forced++;
        }
        // Temporal sharing: even a launch held too long waits for the owner's
        // request to end (then it goes first: be_first).
        if (policy_->exclusive_requests() && exclusive_owner_ >= 0 && exclusive_owner_ != t.client) {
          h.denied = true;
          break;
        }
        const std::size_t count = request_length(t.client);
        const std::size_t index = count > 0 ? t.index_in_request % count : t.index_in_request;
        const SchedulerView v = view(now);
        if (!t.aged && !policy_->admit(v, t.client, index, count, h.kernel)) {
          h.denied = true;
          break;
        }
        // Released ahead: the lead hid running BE work, and the policy would
        // refuse the kernel with that work counted (a policy that admits
        // everything, mps or streams, never releases ahead).
        const bool ahead = !t.aged && v.be_outstanding_kernels < be_outstanding_kernels_ &&
                           !policy_->admit(view(now, false), t.client, index, count, h.kernel);
        if (policy_->exclusive_requests()) exclusive_owner_ = t.client;
        policy_->on_release(v, t.client, h.kernel);
        Held taken = h;
        t.held.pop_front();
        release(si, taken, now, ahead);
        // A client that marks no requests is excused one launch at a time.
        if (!t.in_request) t.aged = false;
        progress = true;
      }
    }
  }
  return progress;
}

void LiveScheduler::drop_slot(int slot_index, const char* why) {
  SlotTrack& t = slots_[static_cast<std::size_t>(slot_index)];
  LiveClientStats& s = stats_[static_cast<std::size_t>(t.client)];
  const std::size_t in_flight = t.in_flight.size(), held = t.held.size();
  for (const InFlight& f : t.in_flight) finish(slot_index, f);
  const bool clean = segment_->slots[slot_index].exited.load(std::memory_order_acquire) != 0;
  if (!clean) s.lost_processes++;
  // A process that leaves with launches in flight or held, or a request
  // open, was at work until then (a stopped BE program is usually waiting
  // on its GPU work, its last launch long past): its command's span, and so
  // the report's common window, runs to its leaving, found within
  // kReapEveryNs. One that finished its work keeps its last event.
  const std::int64_t left_ns = monotonic_ns();
  if (in_flight > 0 || held > 0 || t.in_request) s.last_ns = std::max(s.last_ns, left_ns);
  if (t.in_request) s.unfinished_requests.push_back({t.request_begin_ns, left_ns});
  log_event(R"({"t_us":%.1f,"event":"leave","client":"%s","pid":%d,"why":"%s","in_flight":%zu,"held":%zu})",
            (left_ns - start_ns_) / 1e3, s.name.c_str(), t.pid, clean ? "exited" : why, in_flight, held);
  if (exclusive_owner_ == t.client) exclusive_owner_ = -1;
  t = SlotTrack{};
  reset_slot(segment_->slots[slot_index]);
}

int LiveScheduler::reap_dead_clients() {
  int reaped = 0;
  for (int si = 0; si < kMaxSlots; ++si) {
    const SlotTrack& t = slots_[static_cast<std::size_t>(si)];
    if (!t.active || process_alive(segment_->slots[si].pid.load(std::memory_order_relaxed))) continue;
    // Account for what it posted before dying, then recycle the slot.
    consume_new(si);
    collect_completions(si);
    drop_slot(si, "killed");
    ++reaped;
  }
  return reaped;
}

bool LiveScheduler::poll() {
  bool progress = false;
  for (int si = 0; si < kMaxSlots; ++si) {
    progress |= consume_new(si);
    if (slots_[static_cast<std::size_t>(si)].active) progress |= collect_completions(si);
  }
  progress |= decide();
  if (log_ != nullptr && hp_client_ >= 0) {
    const bool active = hp_request_active();
    if (active != hp_active_logged_) {
      hp_active_logged_ = active;
      log_event(R"({"t_us":%.1f,"event":"hp_active","on":%s})", (monotonic_ns() - start_ns_) / 1e3,
                active ? "true" : "false");
    }
  }
  return progress;
}

void LiveScheduler::run(const std::atomic<bool>& stop) {
  // Release-ahead deadlines are tens of microseconds apart: sleep no longer
  // than asked (the default timer slack is 50 us).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  int idle = 0;
  std::int64_t last_reap = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    const std::int64_t now = monotonic_ns();
    if (now - last_reap > kReapEveryNs) {
      reap_dead_clients();
      last_reap = now;
    }
    if (poll()) {
      idle = 0;
      continue;
    }
    if (++idle < kIdleSpins) continue;
    const std::uint32_t bell = segment_->doorbell.load(std::memory_order_acquire);
    segment_->scheduler_sleeping.store(1, std::memory_order_seq_cst);
    const std::int64_t now_idle = monotonic_ns();
    const std::int64_t deadline = next_deadline_ns(now_idle);
    const std::int64_t sleep_ns = deadline > 0 ? std::min(kIdleSleepNs, deadline - now_idle) : kIdleSleepNs;
    if (!poll()) futex_wait(&segment_->doorbell, bell, sleep_ns);
    segment_->scheduler_sleeping.store(0, std::memory_order_relaxed);
    idle = 0;
  }
}

}  // namespace fleet::orion::live
