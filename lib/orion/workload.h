// Workloads for the simulator: which clients share the GPU, their kernel
// profiles, priorities and arrival processes. Reads our JSON format and
// Orion's own workload configs (a list of clients, the high-priority one last).
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "orion/device_spec.h"
#include "orion/kernel_profile.h"
#include "orion/occupancy.h"

namespace fleet::orion {

/// How a client's requests arrive.
enum class ArrivalKind { kClosedLoop, kPoisson, kUniform, kTrace };

/// The arrival process of one client.
struct ArrivalSpec {
  ArrivalKind kind = ArrivalKind::kClosedLoop;
  double rate_per_s = 0;             ///< Poisson / uniform
  std::vector<double> trace_gaps_s;  ///< inter-arrival gaps, cycled (trace)
};

/// A kernel as the simulator sees it.
struct SimKernel {
  double duration_us = 0;     ///< solo duration
  std::int64_t sm_usage = 0;  ///< SMs needed at full occupancy (uncapped: may exceed the device)
  int sm_need = 1;            ///< SMs it can use at once: sm_usage clamped to [1, device SMs]
  KernelClass cls = KernelClass::kUnknown;
  /// What one SM's worth of its blocks holds of an SM, from its launch data;
  /// all zero when the profile has none (the simulator then assumes its
  /// class's default, docs/orion-simulator.md).
  SmShare sm_share{};
};

/// One client: a model doing inference requests or training iterations.
struct ClientSpec {
  std::string name;
  bool high_priority = false;
  bool training = false;
  std::vector<SimKernel> kernels;        ///< one request / iteration
  std::vector<SimKernel> first_kernels;  ///< first iteration, when it differs (Orion's fb0); else empty
  ArrivalSpec arrivals;
  std::int64_t requests = 0;  ///< requests/iterations to run (0: until the high-priority client is done)
  std::int64_t warmup = 0;    ///< first requests left out of the statistics
  double gap_us = 0;          ///< closed loop: host time between the end of one request and the next
  /// CPU time to launch one of its kernels; negative: the workload's
  /// launch_overhead_us. A framework that launches from Python (PyTorch
  /// eager) spends 10-20 us per kernel, a CUDA graph or C++ loop a few.
  double launch_overhead_us = -1;
  /// Under MPS, the share of the SMs its context may use, in percent
  /// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); 100: all of them.
  double mps_active_thread_percentage = 100;
  std::string profile_path;          ///< for reports
  std::uint64_t arrival_stream = 0;  ///< random stream of its arrivals (its index in the workload), so
                                     ///< a client alone (dedicated) sees the same arrivals as collocated
};

/// Everything a simulation needs.
struct Workload {
  DeviceSpec device;
  std::vector<ClientSpec> clients;
  std::uint64_t seed = 1;
  double launch_overhead_us = 5.0;  ///< CPU time to launch one kernel
  double max_duration_s = 0;        ///< stop after this much simulated time (0: none)
  std::string source;
};

/// Converts a profile to simulator kernels on `device` (SM need clamped to its SMs).
std::vector<SimKernel> to_sim_kernels(const KernelProfile& profile, const DeviceSpec& device);

/// Loads a workload file: our format ({"format": "gpufleet-orion-workload", ...})
/// or Orion's config list. Profile paths are resolved against
/// `profile_dirs` first, then the workload file's folder; a path without
/// ".csv" gets it added (Orion writes them that way).
Workload load_workload(const std::filesystem::path& path, const std::vector<std::filesystem::path>& profile_dirs = {});

/// The arrival times of an open-loop client, drawn one at a time (a run
/// holds one number per client, whatever its rate and length), deterministic
/// for a seed.
class ArrivalStream {
 public:
  ArrivalStream(const ArrivalSpec& spec, std::uint64_t seed);
  /// The next arrival in seconds; +infinity for a closed-loop client.
  double next();

 private:
  ArrivalSpec spec_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> exponential_;
  double t_ = 0;
  double phase_s_ = 0;  ///< uniform: the first arrival, drawn in [0, 1 / rate)
  std::size_t index_ = 0;
};

/// Arrival times in seconds of the first `count` requests of an open-loop
/// client (ArrivalStream's first `count`). Empty for closed-loop clients.
std::vector<double> generate_arrivals(const ArrivalSpec& spec, std::int64_t count, std::uint64_t seed);

}  // namespace fleet::orion
