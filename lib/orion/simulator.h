// Discrete-event simulator of one GPU shared by several clients under a
// scheduling policy. The model (docs/orion-simulator.md):
//  - each client is one in-order stream; a request/iteration's kernels are
//    launched by the CPU one per launch_overhead_us, released to the GPU
//    when the policy admits them, and start when their predecessor finished;
//  - kernels are dispatched block by block (in SM units: one SM's worth of
//    a kernel's resident blocks) onto SMs with room for them by their warp,
//    register, shared-memory and block-slot limits; a kernel with more units
//    than SMs runs in waves; freed room goes to the high-priority stream
//    first when the policy uses stream priorities, else first come first
//    served; resident blocks are never taken back;
//  - running kernels share the device's compute and memory bandwidth in
//    proportion to their demand (a class-dependent fraction scaled by the
//    share of SMs they hold); same-class neighbours add a small interference.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/chrome_trace.h"
#include "common/progress.h"
#include "orion/contention_model.h"
#include "orion/policy.h"
#include "orion/workload.h"

namespace fleet::orion {

/// Options of one simulation.
struct SimOptions {
  PolicyOptions policy;
  ContentionModel model;
  std::size_t trace_kernel_limit = 20000;              ///< kernels recorded in a trace (the first ones)
  std::uint64_t max_events_without_time = 20'000'000;  ///< events at one instant before the run is called stuck
  double max_be_wait_us = 100'000;  ///< a best-effort kernel held this long is admitted anyway (0: never forced)
  /// Progress of a long run, in the bounded clients' requests (or simulated
  /// time when only max_duration_s bounds it): a bar on a terminal, a log
  /// line every progress_interval otherwise, nothing for a run shorter than
  /// that or with quiet logging.
  ProgressStyle progress_style = ProgressStyle::kAuto;
  std::chrono::milliseconds progress_interval{10'000};
  std::function<void(const std::string&)> progress_sink;  ///< where log lines go (default: the log)
  std::string progress_label;                             ///< default: the policy's name
};

/// Per-client outcome.
struct ClientResult {
  std::string name;
  bool high_priority = false;
  bool training = false;
  std::int64_t completed = 0;            ///< measured requests/iterations (after warm-up)
  std::int64_t completed_in_window = 0;  ///< of those, completed within the common window
  double throughput_per_s = 0;  ///< per second over the common window: those, plus the done part of the one in progress
  bool starved = false;         ///< not one request (warm-up included) completed within the common window
  /// Open loop: arrival rate x mean service time over the requests measured
  /// in the window (-1: closed loop, or fewer than 3 requests).
  double offered_load = -1;
  /// Open loop: its requests arrived faster than they were served, clearly
  /// beyond chance (orion/offered_load.h); its latencies then grow with
  /// the run's length.
  bool overloaded = false;
  /// Latency (iteration time for training) of the requests completed within
  /// the common window, the first completed_in_window of latencies_ms; each
  /// figure raised, where needed, to the least the requests still in flight
  /// at the window's end allow, counted at their age then
  /// (summarize_with_lower_bounds).
  double mean_ms = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0;
  /// Measured requests issued but not completed when the window closed:
  /// the one in progress, a closed loop's next one kept from the GPU
  /// (temporal sharing), an open loop's queue (at most 1e7).
  std::int64_t in_flight_at_window_end = 0;
  std::vector<double> latencies_ms;  ///< every measured latency, in completion order
  std::vector<double> done_us;       ///< when each of those requests ended (simulated us)
  bool open_loop = false;            ///< requests arrive on their own (not closed loop)
  bool all_requests_done = false;    ///< a client with a request count completed them all
  /// The common window, in simulated us: from the client's first measured
  /// request to when the first client ran out of work (or the run ended);
  /// both -1 when no request was measured.
  double window_start_us = -1, window_end_us = -1;
  std::int64_t forced_admissions = 0;  ///< BE kernels admitted after waiting max_be_wait_us
  std::int64_t preempted = 0;          ///< BE kernels reset by an arriving HP request (reef)
  double preempted_work_ms = 0;        ///< solo time of the work those resets threw away
  /// Dedicated runs only (each client alone on its own GPU): that GPU's busy
  /// fraction and SM utilisation; negative in a shared run, whose figures
  /// are the SimResult's.
  double own_gpu_busy_fraction = -1, own_gpu_sm_utilization = -1;
};

/// Requests/iterations a client must complete for its figures to be compared
/// with its dedicated run; below it the report names the outcome instead.
inline constexpr std::int64_t kMinCompletedForRatios = 5;

/// Measured iterations the dedicated run of a closed-loop client without a
/// request count ("until the others are done") gets at least, beyond the
/// bounded clients' dedicated run time: its reference figures must not
/// rest on the two or three iterations a short HP run leaves it. (An
/// open-loop one keeps that time: the same arrivals as the shared runs.)
inline constexpr std::int64_t kMinDedicatedRequests = 20;

/// Outcome of one simulation.
struct SimResult {
  std::string policy;
  std::string policy_summary;  ///< what the policy settled on (orion's tuned SM threshold), or ""
  std::vector<ClientResult> clients;
  double simulated_s = 0;     ///< simulated time
  double busy_fraction = 0;   ///< time with at least one kernel running
  double sm_utilization = 0;  ///< time-average of the fraction of SMs holding blocks
  std::uint64_t kernels = 0;  ///< kernels simulated
  /// Simulated time with an HP request or iteration in progress, and the
  /// fraction of it during which best-effort blocks were resident beside
  /// it (what a policy gains over temporal sharing; 0 without an HP client).
  double hp_active_s = 0;
  double hp_corun_fraction = 0;
};

/// Runs `workload` under `policy` ("dedicated" runs each client alone).
/// Records a timeline into `trace` when given. RuntimeFailure if the policy stalls.
SimResult simulate(const Workload& workload, std::string_view policy, const SimOptions& options = {},
                   ChromeTrace* trace = nullptr);

/// Reruns alone, for longer, each open-loop client without a request count
/// whose dedicated run ended before one of the `shared` runs' windows did:
/// its ratios compare the same arrivals over the same window
/// (compare_to_dedicated), which the dedicated run must then hold. Its
/// first horizon, the bounded clients' time alone, is shorter than a shared
/// run slowed by the sharing.
void cover_shared_windows(const Workload& workload, SimResult& dedicated, const std::vector<SimResult>& shared,
                          const SimOptions& options = {});

/// Whether a client's dedicated run holds what the same-window comparison
/// needs up to `t_us`: a request that ended after it (the one in progress
/// at t_us counts by its part done), or all of its requests.
bool dedicated_run_covers(const ClientResult& alone, double t_us);

/// Speed (fraction of solo speed per resident block) of each of `running`
/// kernels (kernel, SMs holding its blocks) under the model, written to
/// `speeds`; exposed for tests.
void contention_speeds(const std::vector<std::pair<const SimKernel*, int>>& running, int device_sms,
                       const ContentionModel& model, std::vector<double>& speeds);

}  // namespace fleet::orion
