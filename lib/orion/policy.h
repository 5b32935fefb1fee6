// Scheduling policies behind one interface, shared by the simulator and the
// live scheduler: each decides, kernel by kernel, when a client's next
// launched kernel may be released to the GPU.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "orion/contention_model.h"
#include "orion/workload.h"

namespace fleet::orion {

/// What a policy may look at when deciding. Filled by the scheduler.
struct SchedulerView {
  int device_sms = 0;
  int hp_client = -1;                     ///< index of the high-priority client, -1 if none
  bool hp_request_active = false;         ///< an HP request/iteration has arrived and not finished
  const SimKernel* hp_current = nullptr;  ///< HP kernel most recently released (null before its first)
  bool hp_current_done = true;            ///< that kernel has completed
  double be_outstanding_us = 0;           ///< solo duration of released, unfinished BE kernels
  int be_outstanding_kernels = 0;
  double hp_request_solo_us = 0;    ///< solo latency of one HP request (sum of its kernels)
  double now_us = 0;                ///< the scheduler's clock
  double hp_request_start_us = -1;  ///< when the active HP request began to be served (-1: unknown)
  /// When the active HP request arrived (-1: unknown; the live scheduler
  /// sees requests only when they start), and when the next one arrived if
  /// it is already waiting behind it (-1: none waiting or unknown).
  double hp_request_arrival_us = -1;
  double hp_next_arrival_us = -1;
  std::size_t hp_kernels_done = 0;  ///< kernels of the active HP request completed
  /// Whether hp_kernels_done follows the GPU. Live, the HP kernels of a
  /// marked request report no completions (an event behind each would cost
  /// the HP client), so how far the request has got is not known there.
  bool hp_progress_known = true;
};

/// Tunables of the policies (defaults follow Orion's code and paper).
struct PolicyOptions {
  /// orion: Orion's DUR_THRESHOLD, as a fraction of the HP request's solo
  /// latency: the cap on outstanding BE work (what an arriving HP request
  /// may find queued ahead of it), and the fixed co-run slack when
  /// hp_slowdown_limit is 0 (below).
  double dur_threshold_fraction = 0.025;
  /// orion: during an HP request, a BE kernel may run beside it when what
  /// one wave of its blocks costs the request (the part of the wave whose
  /// SMs the HP kernels of that time need, which wait for it, plus what the
  /// HP loses to contention beside it; docs/orion-simulator.md, "Orion's
  /// co-run rule") fits in the request's spare time: hp_slowdown_limit
  /// times the request's latency on a GPU of its own (its service time
  /// alone, kernels back to back with launches paced by the launch
  /// overhead, plus its wait there behind earlier HP requests), less the
  /// time since it arrived, the time its remaining kernels take alone and
  /// the BE work already released; no more than the next HP request, if it
  /// already waits, can spare. Each request then ends within about the
  /// limit of its latency alone. Without arrivals (live) the service time
  /// alone, from the request's start; without its progress (live), the
  /// estimated cost of the BE waves released beside it is counted against
  /// (limit - 1) x its time alone instead. 0: a fixed slack of
  /// dur_threshold_fraction of the HP request's solo latency instead.
  double hp_slowdown_limit = 1.15;
  int sm_threshold = -1;  ///< orion: max SM need of a BE kernel during HP requests (-1: auto)
  /// orion, training HP client: its iteration-time target in ms. Above 0,
  /// the SM threshold is searched online as Orion does (a bisection between
  /// 0 and the largest BE kernel's need, one step per `tune_every` HP
  /// iterations: lower when their mean exceeds the target, higher otherwise).
  double hp_limit_ms = 0;
  int tune_every = 10;
  /// reef: released, unfinished BE kernels at most (REEF-N's bounded device
  /// queue: what a preemption cannot take back stays this short).
  int reef_queue_depth = 4;
  /// Every policy, simulated and live: a BE kernel held this long is
  /// admitted anyway and the rest of its request served unchecked
  /// (temporal sharing: its request goes first at the next boundary); 0: never.
  double max_be_wait_ms = 100;

  /// UsageError naming the flag (`orion-run`'s) for a value out of range or
  /// two that contradict each other.
  void validate() const;
};

/// The decision interface.
class Policy {
 public:
  virtual ~Policy() = default;
  /// Short name ("orion", "mps", ...).
  virtual std::string_view name() const = 0;
  /// May `client`'s kernel number `index` (of `count` in its request) go to the GPU now?
  virtual bool admit(const SchedulerView& view, int client, std::size_t index, std::size_t count,
                     const SimKernel& kernel) = 0;
  /// `kernel` of `client` went to the GPU: admitted, or forced after the
  /// bounded wait. What a decision commits is counted here, not in admit,
  /// which a scheduler may also call to ask without releasing.
  virtual void on_release(const SchedulerView& view, int client, const SimKernel& kernel) {}
  /// A released kernel finished.
  virtual void on_complete(int client, std::size_t index, std::size_t count) {}
  /// A request or iteration of `client` finished after `latency_us` (arrival to last kernel).
  virtual void on_request_done(int client, double latency_us) {}
  /// What the policy settled on, for the report ("" when nothing to say).
  virtual std::string summary() const { return {}; }
  /// True: one request/iteration at a time on the whole GPU (temporal sharing).
  virtual bool exclusive_requests() const { return false; }
  /// True: the HP client's stream has priority when SMs are handed out.
  virtual bool priority_streams() const { return true; }
  /// True: an arriving HP request resets the running BE kernels (REEF's
  /// kernel-reset preemption); they lose their progress and wait to be
  /// admitted again.
  virtual bool preempts_best_effort() const { return false; }
  /// True: each client's kernels use at most its MPS share of the SMs
  /// (ClientSpec::mps_active_thread_percentage).
  virtual bool limits_client_sms() const { return false; }
};

/// Names accepted by make_policy, in table order ("dedicated" is a run mode, listed too).
const std::vector<std::string>& policy_names();
/// Creates a policy: orion, temporal, streams, mps, reef, tick-tock. InputError otherwise.
/// `model` is the contention the simulator charges co-running kernels; orion
/// estimates with it what a best-effort kernel costs the HP request.
std::unique_ptr<Policy> make_policy(std::string_view name, const Workload& workload, const PolicyOptions& options = {},
                                    const ContentionModel& model = {});

/// The policies `orion-run simulate -p SPEC` runs beside the dedicated
/// baseline, in table order. SPEC is one name, "all" (every policy that
/// applies to the workload; the others are skipped with an info line), or a
/// comma-separated list run in the order given. "dedicated" adds nothing (its
/// row is always there). InputError for an unknown or inapplicable name, an
/// empty item or a name listed twice.
std::vector<std::string> select_policies(std::string_view spec, const Workload& workload);

}  // namespace fleet::orion
