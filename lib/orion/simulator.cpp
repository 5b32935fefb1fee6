#include "orion/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"
#include "common/stats.h"
#include "orion/offered_load.h"
#include "orion/simulation_size.h"
#include "orion/sm_pool.h"

namespace fleet::orion {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;
// In-flight requests whose ages a client's figures take into account, at
// most (a workload's cap on one client's requests).
constexpr std::int64_t kMaxInFlightAges = 10'000'000;

int class_index(KernelClass c) { return static_cast<int>(c) + 1; }

// The kernel at the head of a client's stream, once it has gone to the GPU.
struct GpuKernel {
  bool on = false;
  std::size_t index = 0;
  const SimKernel* kernel = nullptr;
  SmShare share{};
  int units_unplaced = 0;  // SM units not yet placed
  int units_resident = 0;  // SM units on SMs now
  int units_total = 0;
  double unit_us = 0;  // solo time of one unit (one wave)
  double speed = 1;
  double ready_us = 0;                           // when it became the head: first come, first served for SMs
  double start_us = -1;                          // its first unit placed
  std::uint64_t no_room_at = ~std::uint64_t{0};  // pool generation at which it last found no room
};

// Units of one kernel placed together: they end together.
struct Cohort {
  int client;
  int units;
  double remaining_us;  // solo-time units left
};

struct ClientRun {
  const ClientSpec* spec = nullptr;
  std::optional<ArrivalStream> arrivals;  // open loop
  double next_arrival_us = kInf;          // the next request's arrival (open loop), infinite when none is left
  std::int64_t requests_started = 0;
  // Current request.
  const std::vector<SimKernel>* kernels = nullptr;
  bool active = false;
  double request_arrival_us = 0;
  double request_start_us = 0;  // when it began to be served (after the client's earlier requests)
  std::size_t launched = 0, released = 0, started = 0, completed = 0;
  double next_launch_us = 0;
  GpuKernel gpu;
  int sm_cap = 0;  // SMs its kernels may hold at once (its MPS share under mps; else every SM)
  // Results.
  std::int64_t done = 0;
  double measure_start_us = -1;
  std::vector<double> latencies_ms;
  std::vector<double> measured_done_us;  // when each measured request ended (parallel to latencies_ms)
  double first_done_us = -1;             // when its first request (warm-up included) ended (-1: none yet)
  double finished_us = -1;               // when a bounded client completed its last request (-1: not, or unbounded)
  double ready_us = 0;                   // closed loop: when the next request may start (after the host gap)
  double head_held_since_us = -1;        // the BE head kernel the policy refused, since when (-1: none)
  double kept_off_since_us = -1;         // a BE request kept from the GPU by exclusive requests, since when (-1: none)
  // A BE client held for max_be_wait_us: its request in progress is then
  // served to its end without the policy's tests (and not preempted), or
  // under temporal sharing its next request has the GPU at the next request
  // boundary. Without it an HP client that always has a request active
  // (a closed loop) leaves the BE one kernel per wait at best.
  bool aged = false;
  std::int64_t forced = 0;
  std::int64_t preempted = 0;
  double preempted_work_us = 0;

  bool limit_reached() const { return spec->requests > 0 && requests_started >= spec->requests; }
  bool finished() const { return spec->requests > 0 && done >= spec->requests; }
  std::size_t count() const { return kernels->size(); }
};

class Simulation {
 public:
  Simulation(const Workload& w, Policy& policy, const SimOptions& options, ChromeTrace* trace)
      : w_(w),
        policy_(policy),
        options_(options),
        trace_(trace),
        sms_(w.device.sm_count),
        pool_(w.device.sm_count, static_cast<int>(w.clients.size())) {
    clients_.resize(w.clients.size());
    for (std::size_t i = 0; i < w.clients.size(); ++i) {
      ClientRun& c = clients_[i];
      c.spec = &w.clients[i];
      bounded_requests_ += static_cast<std::uint64_t>(std::max<std::int64_t>(0, w.clients[i].requests));
      c.sm_cap = sms_;
      if (policy_.limits_client_sms()) {
        // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: the context's kernels run on that share of the SMs.
        const double share = c.spec->mps_active_thread_percentage / 100.0;
        c.sm_cap = std::clamp(static_cast<int>(std::ceil(share * sms_)), 1, sms_);
      }
      if (c.spec->high_priority) {
        view_.hp_client = static_cast<int>(i);
        for (const SimKernel& k : c.spec->kernels) view_.hp_request_solo_us += k.duration_us;
      }
      if (c.spec->arrivals.kind != ArrivalKind::kClosedLoop) {
        c.arrivals.emplace(c.spec->arrivals, w.seed + 7919 * c.spec->arrival_stream);
        c.next_arrival_us = c.arrivals->next() * 1e6;
      }
    }
    view_.device_sms = sms_;
    dispatch_order_.resize(clients_.size());
    for (std::size_t i = 0; i < clients_.size(); ++i) dispatch_order_[i] = static_cast<int>(i);
    if (policy_.priority_streams() && view_.hp_client >= 0) {
      std::stable_partition(dispatch_order_.begin(), dispatch_order_.end(),
                            [&](int c) { return c == view_.hp_client; });
    }
    if (trace_ != nullptr) {
      trace_->set_process_name(1,
                               std::string("GPU (") + w.device.name + ", policy " + std::string(policy.name()) + ")");
      for (std::size_t i = 0; i < clients_.size(); ++i) {
        const ClientSpec& s = *clients_[i].spec;
        trace_->set_thread_name(1, static_cast<int>(2 * i),
                                s.name + (s.high_priority ? " [HP] kernels" : " [BE] kernels"),
                                static_cast<int>(2 * i));
        trace_->set_thread_name(1, static_cast<int>(2 * i + 1), s.name + " requests", static_cast<int>(2 * i + 1));
      }
    }
  }

  SimResult run() {
    // Work that takes no simulated time at all (zero-duration kernels and no
    // launch overhead in a closed loop) would repeat forever at one instant.
    std::uint64_t events_at_this_time = 0;
    double last_time = -1;
    Progress progress(options_.progress_label.empty() ? std::string(policy_.name()) : options_.progress_label,
                      progress_total(), bounded_requests_ > 0 ? "requests" : "simulated ms", options_.progress_style);
    progress.set_log_interval(options_.progress_interval);
    if (options_.progress_sink) progress.set_sink(options_.progress_sink);
    std::uint64_t loops = 0;
    start_requests();
    while (!done()) {
      if ((++loops & 4095) == 0) progress.set(progress_done());  // the clock is read every few thousand events
      if (now_ > last_time) {
        last_time = now_;
        events_at_this_time = 0;
      } else if (++events_at_this_time > options_.max_events_without_time) {
        throw RuntimeFailure("no simulated time passes under policy '" + std::string(policy_.name()) +
                             "': the kernels take no time and launching them neither (zero durations with "
                             "launch_overhead_us 0); give the kernels durations or a launch overhead");
      }
      schedule();
      update_speeds();
      trace_sm_counter();
      const double next = next_event();
      if (next == kInf) {
        if (done()) break;
        throw RuntimeFailure("simulation stalled under policy '" + std::string(policy_.name()) +
                             "': work is waiting but nothing can run");
      }
      advance(next);
      complete_finished();
      if (window_ended_ && progress_at_window_end_.empty()) take_progress_at_window_end();
      start_requests();
    }
    if (progress_at_window_end_.empty()) take_progress_at_window_end();
    progress.set(progress_done());
    progress.finish_if_shown();
    return result();
  }

 private:
  // Progress: the bounded clients' requests, or simulated time when only the
  // workload's time limit bounds the run.
  std::uint64_t progress_total() const {
    return bounded_requests_ > 0 ? bounded_requests_ : static_cast<std::uint64_t>(w_.max_duration_s * 1e3);
  }
  std::uint64_t progress_done() const {
    if (bounded_requests_ == 0) return static_cast<std::uint64_t>(now_ / 1e3);
    std::uint64_t done = 0;
    for (const ClientRun& c : clients_)
      if (c.spec->requests > 0) done += static_cast<std::uint64_t>(std::min(c.done, c.spec->requests));
    return done;
  }

  bool done() const {
    if (w_.max_duration_s > 0 && now_ >= w_.max_duration_s * 1e6) return true;
    bool any_bounded = false;
    for (const ClientRun& c : clients_) {
      if (c.spec->requests > 0) {
        any_bounded = true;
        if (!c.finished()) return false;
      }
    }
    return any_bounded;
  }

  bool gpu_owned_by_other(int client) const {
    if (!policy_.exclusive_requests()) return false;
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (static_cast<int>(i) != client && clients_[i].active) return true;
    }
    return false;
  }

  void start_requests() {
    if (!policy_.exclusive_requests()) {
      for (int i : dispatch_order_) try_start_request(i);
      return;
    }
    start_order_ = dispatch_order_;  // served_best_effort reorders dispatch_order_ (scratch: no allocation once sized)
    // A BE request kept waiting for max_be_wait_us goes before the HP one.
    std::stable_partition(start_order_.begin(), start_order_.end(), [&](int i) { return kept_off_too_long(i); });
    for (int i : start_order_) {
      if (try_start_request(i)) served_best_effort(i);
    }
  }

  // Best-effort clients take turns: the one just served goes to the back.
  void served_best_effort(int client) {
    if (client == view_.hp_client && policy_.priority_streams()) return;
    auto first = dispatch_order_.begin();
    if (policy_.priority_streams() && view_.hp_client >= 0) ++first;
    auto it = std::find(first, dispatch_order_.end(), client);
    if (it != dispatch_order_.end()) std::rotate(first, it + 1, dispatch_order_.end());
  }

  bool kept_off_too_long(int i) const {
    const ClientRun& c = clients_[i];
    return i != view_.hp_client && view_.hp_client >= 0 && options_.max_be_wait_us > 0 && c.kept_off_since_us >= 0 &&
           now_ + kEps >= c.kept_off_since_us + options_.max_be_wait_us;
  }

  bool try_start_request(int i) {
    ClientRun& c = clients_[i];
    if (c.active || c.limit_reached()) return false;
    // A closed-loop request is issued when the client is ready (the last one
    // ended, plus its host gap): time spent waiting for the GPU after that
    // (temporal sharing) is part of its latency, as the client sees it.
    double arrival = std::min(now_, c.ready_us);
    if (c.spec->arrivals.kind == ArrivalKind::kClosedLoop && c.ready_us > now_ + kEps) return false;
    if (c.spec->arrivals.kind != ArrivalKind::kClosedLoop) {
      if (c.next_arrival_us > now_ + kEps) return false;
      arrival = c.next_arrival_us;
    }
    if (gpu_owned_by_other(i)) {
      // Temporal sharing: the HP client goes first when the GPU frees up
      // (unless a BE request has waited max_be_wait_us: start_requests).
      if (c.kept_off_since_us < 0) c.kept_off_since_us = arrival;
      return false;
    }
    if (kept_off_too_long(i)) ++c.forced;
    c.kept_off_since_us = -1;
    if (c.arrivals) c.next_arrival_us = c.arrivals->next() * 1e6;
    c.active = true;
    c.request_arrival_us = arrival;
    c.request_start_us = now_;
    c.kernels = (c.requests_started == 0 && !c.spec->first_kernels.empty()) ? &c.spec->first_kernels : &c.spec->kernels;
    c.launched = c.released = c.started = c.completed = 0;
    c.next_launch_us = now_ + launch_overhead_us(c);
    ++c.requests_started;
    if (i == view_.hp_client) {
      view_.hp_request_active = true;
      view_.hp_current = nullptr;
      view_.hp_current_done = true;
      if (policy_.preempts_best_effort()) preempt_best_effort();
    }
    if (c.measure_start_us < 0 && c.requests_started > c.spec->warmup) c.measure_start_us = arrival;
    return true;
  }

  // The work a client's running kernel has done, in SM units: its finished
  // units and the finished part of its resident ones.
  double running_units_done(int client) const {
    const GpuKernel& g = clients_[client].gpu;
    double units = g.units_total - g.units_unplaced - g.units_resident;
    if (g.unit_us > 0) {
      for (const Cohort& h : cohorts_) {
        if (h.client == client) units += h.units * (1.0 - h.remaining_us / g.unit_us);
      }
    }
    return units;
  }

  // The fraction of a client's measured request in progress that is done,
  // by its kernels' solo durations (0 when none is in progress).
  double request_progress(int client) const {
    const ClientRun& c = clients_[client];
    if (!c.active || c.done < c.spec->warmup) return 0;
    double total = 0, done = 0;
    for (std::size_t k = 0; k < c.count(); ++k) {
      total += (*c.kernels)[k].duration_us;
      if (k < c.completed) done += (*c.kernels)[k].duration_us;
    }
    if (c.gpu.on && c.gpu.units_total > 0) {
      done += c.gpu.kernel->duration_us * running_units_done(client) / c.gpu.units_total;
    }
    return total > 0 ? std::min(1.0, done / total) : 0;
  }

  // The part of its current cycle, a request and the host gap after it, a
  // closed-loop client with a gap has done, as a correction to its count
  // of finished requests: the fraction of the cycle's time gone while a
  // request runs (its length estimated from the time it has run and its
  // work done), or minus the fraction still ahead while it waits out the
  // gap after a request already counted. Without it a window that closes
  // in a gap counts the cycle as whole: 5 iterations of 1.2 ms with 19 ms
  // gaps in a short window came out at 1.06x the client's throughput alone.
  double cycle_progress(int client) const {
    const ClientRun& c = clients_[client];
    const double gap_us = c.spec->gap_us;
    if (c.active) {
      const double work = request_progress(client);
      const double elapsed_us = now_ - c.request_arrival_us;
      if (!(work > 0) || !(elapsed_us > 0)) return 0;
      const double length_us = elapsed_us / work;
      return elapsed_us / (length_us + gap_us);
    }
    if (c.done <= c.spec->warmup || c.latencies_ms.empty() || !(now_ < c.ready_us)) return 0;
    const double length_us = 1000.0 * c.latencies_ms.back();
    return -(c.ready_us - now_) / (length_us + gap_us);
  }

  // Where every client stood when the common window closed: the part of
  // the request it was in that counts towards its throughput.
  void take_progress_at_window_end() {
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      const ClientRun& c = clients_[i];
      const bool gapped_loop = c.spec->arrivals.kind == ArrivalKind::kClosedLoop && c.spec->gap_us > 0;
      progress_at_window_end_.push_back(gapped_loop ? cycle_progress(static_cast<int>(i))
                                                    : request_progress(static_cast<int>(i)));
      in_flight_ages_ms_.push_back(in_flight_ages_ms(static_cast<int>(i)));
    }
  }

  // How long each measured request a client had issued but not completed
  // had been waiting or running (ms): the one in progress, a closed loop's
  // next one kept from the GPU (temporal sharing), an open loop's queue
  // (at most kMaxInFlightAges, oldest first). Lower bounds of their
  // latencies: left out, a request that had waited 24 ms was missing from
  // a 5-request mean of 1.78 ms.
  std::vector<double> in_flight_ages_ms(int client) const {
    const ClientRun& c = clients_[client];
    std::vector<double> ages;
    auto measured = [&](std::int64_t number) { return number > c.spec->warmup; };  // number counts from 1
    if (c.active && measured(c.requests_started)) ages.push_back((now_ - c.request_arrival_us) / 1000.0);
    if (!c.arrivals) {
      if (!c.active && !c.limit_reached() && c.ready_us < now_ && measured(c.requests_started + 1)) {
        ages.push_back((now_ - c.ready_us) / 1000.0);
      }
      return ages;
    }
    ArrivalStream ahead = *c.arrivals;  // a copy: the run's own stream does not move
    const std::int64_t left = c.spec->requests > 0 ? c.spec->requests - c.requests_started : kMaxInFlightAges;
    double arrival_us = c.next_arrival_us;
    for (std::int64_t k = 1; k <= std::min(left, kMaxInFlightAges) && arrival_us <= now_; ++k) {
      if (measured(c.requests_started + k)) ages.push_back((now_ - arrival_us) / 1000.0);
      arrival_us = ahead.next() * 1e6;
    }
    return ages;
  }

  // REEF: the running BE kernels are reset; each goes back to its stream's
  // head, unreleased, and waits for the policy to admit it again.
  void preempt_best_effort() {
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      ClientRun& c = clients_[i];
      if (static_cast<int>(i) == view_.hp_client || !c.gpu.on || c.aged) continue;
      GpuKernel& g = c.gpu;
      const double units_done = running_units_done(static_cast<int>(i));
      for (std::size_t j = 0; j < cohorts_.size();) {
        Cohort& h = cohorts_[j];
        if (h.client != static_cast<int>(i)) {
          ++j;
          continue;
        }
        pool_.release(h.client, h.units);
        remove_cohort(j);
      }
      ++c.preempted;
      c.preempted_work_us += g.kernel->duration_us * units_done / g.units_total;
      g.on = false;
      --c.started;
      // Unreleased again (a stream's unstarted kernels are its last released ones).
      for (; c.released > c.started; --c.released) {
        const SimKernel& k = (*c.kernels)[c.released - 1];
        view_.be_outstanding_us = std::max(0.0, view_.be_outstanding_us - k.duration_us);
        --view_.be_outstanding_kernels;
      }
    }
  }

  double launch_overhead_us(const ClientRun& c) const {
    return c.spec->launch_overhead_us >= 0 ? c.spec->launch_overhead_us : w_.launch_overhead_us;
  }

  void remove_cohort(std::size_t j) {
    if (j + 1 != cohorts_.size()) cohorts_[j] = cohorts_.back();
    cohorts_.pop_back();
  }

  void schedule() {
    // CPU launches that are due.
    for (ClientRun& c : clients_) {
      while (c.active && c.launched < c.count() && c.next_launch_us <= now_ + kEps) {
        ++c.launched;
        c.next_launch_us += launch_overhead_us(c);
      }
    }
    // Policy admission, HP first, best-effort clients in turn.
    view_.now_us = now_;
    if (view_.hp_client >= 0) {
      const ClientRun& hp = clients_[view_.hp_client];
      view_.hp_request_start_us = hp.request_start_us;
      view_.hp_request_arrival_us = hp.active ? hp.request_arrival_us : -1;
      view_.hp_next_arrival_us =
          hp.active && !hp.limit_reached() && hp.next_arrival_us <= now_ ? hp.next_arrival_us : -1;
      view_.hp_kernels_done = hp.completed;
    }
    int served = -1;
    for (int i : dispatch_order_) {
      ClientRun& c = clients_[i];
      while (c.active && c.released < c.launched) {
        const SimKernel& k = (*c.kernels)[c.released];
        if (!c.aged && !policy_.admit(view_, i, c.released, c.count(), k)) {
          // A bounded wait: a best-effort kernel is never held forever.
          const bool best_effort = i != view_.hp_client;
          if (!best_effort || view_.hp_client < 0 || options_.max_be_wait_us <= 0) break;
          if (c.head_held_since_us < 0) c.head_held_since_us = now_;
          // The deadline as next_event() computes it (held since + wait): the
          // difference now - since can round below the wait at large times,
          // and the run would then wake at the deadline forever.
          if (now_ + kEps < c.head_held_since_us + options_.max_be_wait_us) break;
          ++c.forced;
          c.aged = true;
        }
        c.head_held_since_us = -1;
        policy_.on_release(view_, i, k);
        ++c.released;
        if (i == view_.hp_client) {
          view_.hp_current = &k;
          view_.hp_current_done = false;
        } else {
          view_.be_outstanding_us += k.duration_us;
          ++view_.be_outstanding_kernels;
          served = i;
        }
      }
    }
    if (served >= 0) served_best_effort(served);
    // Stream heads go to the GPU, then their blocks are placed.
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      ClientRun& c = clients_[i];
      if (c.active && !c.gpu.on && c.started < c.released) start_kernel(c);
    }
    dispatch_blocks();
  }

  void start_kernel(ClientRun& c) {
    const SimKernel& k = (*c.kernels)[c.started];
    GpuKernel& g = c.gpu;
    g.on = true;
    g.index = c.started++;
    g.kernel = &k;
    g.share = k.sm_share;
    if (g.share == SmShare{}) g.share.fill(options_.model.default_unit_share[class_index(k.cls)]);
    // A kernel of W waves runs as at most max_waves, each unit then standing
    // for several consecutive blocks on its SM.
    const std::int64_t units = std::clamp<std::int64_t>(k.sm_usage, 1, std::int64_t{1} << 40);
    const std::int64_t max_waves = std::max(1, options_.model.max_waves);
    const std::int64_t waves = (units + sms_ - 1) / sms_;
    const std::int64_t group = (waves + max_waves - 1) / max_waves;
    g.units_total = static_cast<int>((units + group - 1) / group);
    g.units_unplaced = g.units_total;
    g.units_resident = 0;
    g.unit_us = k.duration_us / static_cast<double>((g.units_total + sms_ - 1) / sms_);
    g.speed = 1;
    g.ready_us = now_;
    g.start_us = -1;
    g.no_room_at = ~std::uint64_t{0};
  }

  // Room on the SMs goes to the waiting kernels in order: the HP stream
  // first when the policy uses stream priorities, then first come, first
  // served. A kernel takes at most one unit per SM and, under MPS limits,
  // at most its client's share of the SMs.
  void dispatch_blocks() {
    waiting_.clear();
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      const GpuKernel& g = clients_[i].gpu;
      if (g.on && g.units_unplaced > 0 && g.no_room_at != pool_.generation()) waiting_.push_back(static_cast<int>(i));
    }
    if (waiting_.empty()) return;
    const bool priority = policy_.priority_streams();
    std::sort(waiting_.begin(), waiting_.end(), [&](int a, int b) {
      const bool ha = priority && a == view_.hp_client, hb = priority && b == view_.hp_client;
      if (ha != hb) return ha;
      const double ra = clients_[a].gpu.ready_us, rb = clients_[b].gpu.ready_us;
      return ra != rb ? ra < rb : a < b;
    });
    for (int i : waiting_) {
      ClientRun& c = clients_[i];
      GpuKernel& g = c.gpu;
      const int wanted = std::min(g.units_unplaced, c.sm_cap - g.units_resident);
      if (wanted <= 0) continue;  // its own cap: room comes back when one of its units ends
      Cohort h{i, 0, g.unit_us};
      h.units = pool_.place(i, g.share, wanted);
      if (h.units < wanted) g.no_room_at = pool_.generation();
      if (h.units == 0) continue;
      g.units_unplaced -= h.units;
      g.units_resident += h.units;
      if (g.start_us < 0) g.start_us = now_;
      cohorts_.push_back(h);
    }
  }

  // A counter track of SMs held, drawn by Perfetto under the kernel rows.
  void trace_sm_counter() {
    if (trace_ == nullptr || kernels_ > options_.trace_kernel_limit) return;
    const int held = pool_.busy_sms();
    if (held != last_traced_sms_) {
      trace_->add_counter(1, "SMs held", now_, "sms", held);
      last_traced_sms_ = held;
    }
  }

  void update_speeds() {
    scratch_.clear();
    on_gpu_.clear();
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      const GpuKernel& g = clients_[i].gpu;
      if (g.on && g.units_resident > 0) {
        scratch_.emplace_back(g.kernel, g.units_resident);
        on_gpu_.push_back(static_cast<int>(i));
      }
    }
    contention_speeds(scratch_, sms_, options_.model, speeds_);
    for (std::size_t j = 0; j < on_gpu_.size(); ++j) clients_[on_gpu_[j]].gpu.speed = speeds_[j];
  }

  double next_event() const {
    double t = kInf;
    for (const Cohort& h : cohorts_) t = std::min(t, now_ + h.remaining_us / clients_[h.client].gpu.speed);
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      const ClientRun& c = clients_[i];
      if (c.active && c.launched < c.count()) t = std::min(t, c.next_launch_us);
      if (c.head_held_since_us >= 0) t = std::min(t, std::max(now_, c.head_held_since_us + options_.max_be_wait_us));
      // A closed-loop client resumes after its host gap.
      if (!c.active && !c.limit_reached() && c.spec->arrivals.kind == ArrivalKind::kClosedLoop && c.ready_us > now_)
        t = std::min(t, c.ready_us);
      // A client kept off the GPU by temporal sharing retries when a request ends.
      if (!c.active && !c.limit_reached() && c.spec->arrivals.kind != ArrivalKind::kClosedLoop &&
          c.next_arrival_us < kInf && !gpu_owned_by_other(static_cast<int>(i))) {
        t = std::min(t, std::max(now_, c.next_arrival_us));
      }
    }
    if (w_.max_duration_s > 0) t = std::min(t, std::max(now_, w_.max_duration_s * 1e6));
    return t;
  }

  void advance(double t) {
    const double dt = t - now_;
    if (dt >= 0) {
      for (Cohort& h : cohorts_) {
        const double speed = clients_[h.client].gpu.speed;
        // Units whose end is t end exactly there, whatever the rounding of
        // remaining / speed (at large t, now + tiny == now).
        h.remaining_us = now_ + h.remaining_us / speed <= t ? 0.0 : h.remaining_us - dt * speed;
      }
      if (!cohorts_.empty() && dt > 0) {
        busy_us_ += dt;
        sm_us_ += dt * static_cast<double>(pool_.busy_sms()) / sms_;
      }
      if (view_.hp_request_active && dt > 0) {
        hp_active_us_ += dt;
        const bool best_effort_resident =
            std::any_of(cohorts_.begin(), cohorts_.end(), [&](const Cohort& h) { return h.client != view_.hp_client; });
        if (best_effort_resident) hp_corun_us_ += dt;
      }
    }
    now_ = t;
  }

  void complete_finished() {
    for (std::size_t j = 0; j < cohorts_.size();) {
      Cohort& h = cohorts_[j];
      if (h.remaining_us > 0) {
        ++j;
        continue;
      }
      const int client = h.client;
      GpuKernel& g = clients_[client].gpu;
      pool_.release(client, h.units);
      g.units_resident -= h.units;
      remove_cohort(j);
      if (g.units_resident == 0 && g.units_unplaced == 0) finish_kernel(client);
    }
  }

  void finish_kernel(int client) {
    ClientRun& c = clients_[client];
    GpuKernel& g = c.gpu;
    ++kernels_;
    if (trace_ != nullptr && kernels_ <= options_.trace_kernel_limit) {
      trace_->add_complete(1, 2 * client, "k" + std::to_string(g.index), kernel_class_name(g.kernel->cls), g.start_us,
                           now_ - g.start_us, {{"sm_units", g.units_total}, {"solo_us", g.kernel->duration_us}});
    }
    if (client == view_.hp_client) {
      if (view_.hp_current == g.kernel) view_.hp_current_done = true;
    } else {
      view_.be_outstanding_us = std::max(0.0, view_.be_outstanding_us - g.kernel->duration_us);
      --view_.be_outstanding_kernels;
    }
    g.on = false;
    ++c.completed;
    policy_.on_complete(client, g.index, c.count());
    if (c.completed == c.count()) finish_request(client);
  }

  void finish_request(int i) {
    ClientRun& c = clients_[i];
    c.active = false;
    c.aged = false;
    ++c.done;
    if (c.first_done_us < 0) c.first_done_us = now_;
    c.ready_us = now_ + c.spec->gap_us;
    if (i == view_.hp_client) view_.hp_request_active = false;
    if (c.done > c.spec->warmup) {
      // What the estimate missed (a bounded client slowed far beyond its
      // solo time) stops here, with memory still bounded.
      if (static_cast<std::int64_t>(c.latencies_ms.size()) >= kMaxRecordsPerClient)
        throw InputError(fmt::format("client '{}' completed {} requests in {:.4g} s of simulated time, the most a run "
                                     "keeps per client: give it a request count or shorten the run",
                                     c.spec->name, kMaxRecordsPerClient, now_ * 1e-6),
                         ErrorContext{w_.source, "", std::nullopt});
      c.latencies_ms.push_back((now_ - c.request_arrival_us) / 1000.0);
      c.measured_done_us.push_back(now_);
    }
    if (c.finished()) {
      c.finished_us = now_;
      window_ended_ = true;
    }
    policy_.on_request_done(i, now_ - c.request_arrival_us);
    if (trace_ != nullptr && kernels_ <= options_.trace_kernel_limit) {
      trace_->add_complete(1, 2 * i + 1, (c.spec->training ? "iteration " : "request ") + std::to_string(c.done),
                           "request", c.request_arrival_us, now_ - c.request_arrival_us);
    }
  }

  // Moves each client's latencies out: called once, at the end of run().
  SimResult result() {
    SimResult out;
    out.policy = std::string(policy_.name());
    out.policy_summary = policy_.summary();
    out.simulated_s = now_ / 1e6;
    out.busy_fraction = now_ > 0 ? busy_us_ / now_ : 0;
    out.sm_utilization = now_ > 0 ? sm_us_ / now_ : 0;
    out.kernels = kernels_;
    out.hp_active_s = hp_active_us_ / 1e6;
    out.hp_corun_fraction = hp_active_us_ > 0 ? hp_corun_us_ / hp_active_us_ : 0;
    double window_end_us = now_;
    for (const ClientRun& c : clients_) {
      if (c.finished_us >= 0) window_end_us = std::min(window_end_us, c.finished_us);
    }
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      ClientRun& c = clients_[i];
      ClientResult r;
      r.name = c.spec->name;
      r.high_priority = c.spec->high_priority;
      r.training = c.spec->training;
      r.latencies_ms = std::move(c.latencies_ms);
      r.done_us = std::move(c.measured_done_us);
      r.open_loop = c.arrivals.has_value();
      r.all_requests_done = c.finished();
      r.completed = static_cast<std::int64_t>(r.latencies_ms.size());
      // Throughput over the common window: from the client's first measured
      // request to the moment the first client ran out of work (or the run's
      // end). Measured to its own last completion, a client would look fast
      // exactly when it completes little; measured to the run's end, one
      // whose bounded work ended early would be charged for time it no
      // longer competed in. The request in progress when the window closed
      // counts by the part of its work done: counting whole requests only
      // would charge a client up to one request's time (20 % of the figure
      // with 5 long iterations in the window).
      const double window_us = c.measure_start_us >= 0 ? window_end_us - c.measure_start_us : 0;
      if (window_us > 0) {
        r.window_start_us = c.measure_start_us;
        r.window_end_us = window_end_us;
        const auto ends = std::upper_bound(r.done_us.begin(), r.done_us.end(), window_end_us);
        r.completed_in_window = ends - r.done_us.begin();
        r.throughput_per_s = (r.completed_in_window + progress_at_window_end_.at(i)) / (window_us / 1e6);
      }
      r.starved = c.first_done_us < 0 || c.first_done_us > window_end_us;
      r.forced_admissions = c.forced;
      r.preempted = c.preempted;
      r.preempted_work_ms = c.preempted_work_us / 1000.0;
      // Latencies over the same requests: those that ended after the window
      // ran with fewer clients beside them (a server that outlives a bounded
      // training job would otherwise mix its latencies alone into the tail
      // reported as shared).
      // The requests still in flight when the window closed count by their
      // age then, as a floor: the figures never fall below what they prove.
      r.in_flight_at_window_end = static_cast<std::int64_t>(in_flight_ages_ms_.at(i).size());
      if (r.completed_in_window > 0) {
        const Summary s = summarize_with_lower_bounds(
            std::span<const double>(r.latencies_ms).first(r.completed_in_window), in_flight_ages_ms_.at(i));
        r.mean_ms = s.mean;
        r.p50_ms = s.p50;
        r.p95_ms = s.p95;
        r.p99_ms = s.p99;
      }
      if (c.arrivals) {
        r.offered_load = offered_load(std::span<const double>(r.done_us).first(r.completed_in_window),
                                      std::span<const double>(r.latencies_ms).first(r.completed_in_window));
        r.overloaded = overloaded_beyond_chance(r.offered_load, r.completed_in_window);
      }
      out.clients.push_back(std::move(r));
    }
    return out;
  }

  const Workload& w_;
  Policy& policy_;
  const SimOptions& options_;
  ChromeTrace* trace_;
  int sms_;
  SmPool pool_;
  double now_ = 0;
  double busy_us_ = 0, sm_us_ = 0;
  double hp_active_us_ = 0, hp_corun_us_ = 0;  // time an HP request was active; of it, with BE blocks resident
  std::uint64_t kernels_ = 0;
  int last_traced_sms_ = -1;
  std::vector<ClientRun> clients_;
  std::vector<Cohort> cohorts_;
  std::vector<int> waiting_, on_gpu_;  // scratch of dispatch_blocks and update_speeds
  std::vector<int> dispatch_order_;
  std::vector<int> start_order_;  // scratch of start_requests
  SchedulerView view_;
  std::vector<std::pair<const SimKernel*, int>> scratch_;
  std::vector<double> speeds_;
  bool window_ended_ = false;                           // a bounded client has completed its last request
  std::uint64_t bounded_requests_ = 0;                  // requests of the clients with a count, all together
  std::vector<double> progress_at_window_end_;          // per client, request_progress when the window closed
  std::vector<std::vector<double>> in_flight_ages_ms_;  // per client, in_flight_ages_ms when the window closed
};

}  // namespace

void contention_speeds(const std::vector<std::pair<const SimKernel*, int>>& running, int device_sms,
                       const ContentionModel& model, std::vector<double>& speeds) {
  double compute = 0, memory = 0;
  int per_class[3] = {0, 0, 0};
  for (const auto& [k, sms] : running) {
    const double share = static_cast<double>(sms) / device_sms;
    compute += share * model.compute_use[class_index(k->cls)];
    memory += share * model.memory_use[class_index(k->cls)];
    ++per_class[class_index(k->cls)];
  }
  const double oversubscription = std::max({1.0, compute, memory});
  speeds.clear();
  for (const auto& [k, sms] : running) {
    // (Fewer SMs than a kernel has units cost it waves, not speed.)
    const int neighbours = k->cls == KernelClass::kUnknown ? 0 : per_class[class_index(k->cls)] - 1;
    speeds.push_back(1.0 / oversubscription / (1.0 + model.same_class_penalty * neighbours));
  }
}

namespace {

// Client `i` of `workload` alone on its own GPU. A client without a request
// count runs for `horizon_s` of simulated time; a closed-loop one also to at
// least kMinDedicatedRequests measured requests (an open-loop one keeps the
// horizon: the same arrivals as the shared runs).
// Returns that run, its one client's result carrying the GPU's figures.
SimResult run_alone(const Workload& workload, std::size_t i, double horizon_s, Policy& streams,
                    const SimOptions& options) {
  Workload alone = workload;
  alone.clients = {workload.clients[i]};
  alone.clients[0].high_priority = false;
  if (alone.clients[0].requests == 0) {
    if (!(horizon_s > 0)) throw InputError("dedicated run of '" + alone.clients[0].name + "' has no bound");
    alone.max_duration_s = horizon_s;
  }
  SimOptions alone_options = options;
  alone_options.progress_label = "dedicated: " + workload.clients[i].name;
  SimResult r = Simulation(alone, streams, alone_options, nullptr).run();
  if (workload.clients[i].requests == 0 && workload.clients[i].arrivals.kind == ArrivalKind::kClosedLoop &&
      r.clients[0].completed_in_window < kMinDedicatedRequests) {
    alone.clients[0].requests = alone.clients[0].warmup + kMinDedicatedRequests;
    alone.max_duration_s = 0;
    r = Simulation(alone, streams, alone_options, nullptr).run();
  }
  ClientResult& c = r.clients[0];
  c.own_gpu_busy_fraction = r.busy_fraction;
  c.own_gpu_sm_utilization = r.sm_utilization;
  c.high_priority = workload.clients[i].high_priority;
  return r;
}

}  // namespace

SimResult simulate(const Workload& workload, std::string_view policy_name, const SimOptions& options,
                   ChromeTrace* trace) {
  check_simulation_size(workload);  // before any memory goes to a run that cannot finish
  if (policy_name != "dedicated") {
    auto policy = make_policy(policy_name, workload, options.policy, options.model);
    return Simulation(workload, *policy, options, trace).run();
  }
  // Dedicated: every client alone on its own GPU. Clients that run "until the
  // others are done" get the bounded clients' dedicated run time (or the
  // workload's time limit) as their horizon.
  SimResult out;
  out.policy = "dedicated";
  auto streams = make_policy("streams", workload, options.policy);
  double horizon_s = workload.max_duration_s;
  std::vector<std::size_t> order(workload.clients.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return workload.clients[i].requests > 0; });
  out.clients.resize(workload.clients.size());
  double busy = 0, sm = 0;
  for (std::size_t i : order) {
    SimResult run = run_alone(workload, i, horizon_s, *streams, options);
    out.clients[i] = std::move(run.clients[0]);
    if (workload.clients[i].requests > 0) horizon_s = std::max(horizon_s, run.simulated_s);
    out.simulated_s = std::max(out.simulated_s, run.simulated_s);
    out.kernels += run.kernels;
    busy += run.busy_fraction;
    sm += run.sm_utilization;
  }
  out.busy_fraction = busy / static_cast<double>(order.size());
  out.sm_utilization = sm / static_cast<double>(order.size());
  return out;
}

void cover_shared_windows(const Workload& workload, SimResult& dedicated, const std::vector<SimResult>& shared,
                          const SimOptions& options) {
  auto streams = make_policy("streams", workload, options.policy);
  for (std::size_t i = 0; i < workload.clients.size(); ++i) {
    const ClientSpec& spec = workload.clients[i];
    if (spec.requests != 0 || spec.arrivals.kind == ArrivalKind::kClosedLoop) continue;
    double needed_us = 0;
    for (const SimResult& r : shared) needed_us = std::max(needed_us, r.clients.at(i).window_end_us);
    // Past the latest shared window, until a request ends after it: the
    // request in progress alone when the window closed counts by its part
    // done, so its end must be in the run (a run that stopped 1 ms past the
    // window missed it, and a server showed 1.11x its dedicated throughput).
    double margin_us = std::max(1000.0, 0.1 * needed_us);
    for (int attempt = 0; attempt < 8 && !dedicated_run_covers(dedicated.clients.at(i), needed_us); ++attempt) {
      SimResult run = run_alone(workload, i, (needed_us + margin_us) / 1e6, *streams, options);
      dedicated.clients[i] = std::move(run.clients[0]);
      dedicated.simulated_s = std::max(dedicated.simulated_s, run.simulated_s);
      dedicated.kernels += run.kernels;
      margin_us *= 4;
    }
  }
}

bool dedicated_run_covers(const ClientResult& alone, double t_us) {
  return alone.all_requests_done || (!alone.done_us.empty() && alone.done_us.back() > t_us);
}

}  // namespace fleet::orion
