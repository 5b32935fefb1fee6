// The plan simulator: iteration time, peak memory per GPU and cost of a
// plan, from per-layer profiles and network fits (model in docs/sailor-model.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/chrome_trace.h"
#include "sailor/plan.h"
#include "sailor/specs.h"

namespace fleet::sailor {

/// Constants of the time and memory model (docs/sailor-model.md). The
/// byte counts per parameter and the bucket size are facts of mixed-precision
/// Adam and of the runtime; the three marked "fitted" are fitted to measured
/// runs (`sailor-plan calibrate`).
struct Calibration {
  double microbatch_overhead_s = 0;      ///< fitted: host work per micro-batch per stage (schedule step, posting sends)
  double weight_bytes_per_param = 6;     ///< fp16 weights + fp32 master copy (mixed precision)
  double gradient_bytes_per_param = 6;   ///< fp16 gradients + fp32 accumulation
  double optimizer_bytes_per_param = 8;  ///< Adam moments in fp32
  double activation_bytes_per_float = 4;  ///< fitted: bytes per activation float kept for backward
  double runtime_overhead_bytes = 0;      ///< fitted: CUDA context, allocator, communicator buffers
  double allreduce_bucket_bytes = 25e6;   ///< gradient bucket size
};

/// The calibration shipped with the toolkit (docs/sailor-model.md).
Calibration default_calibration();

/// Everything the simulator reads.
struct PlannerInputs {
  ModelSpec model;
  ProfileSet profiles;
  ClusterSpec cluster;
  JobSpec job;
  Calibration calibration = default_calibration();
};

/// Peak memory of one GPU of a stage replica.
struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, overhead = 0;
  double total() const { return weights + gradients + optimizer + activations + overhead; }
};

/// One stage's share of the iteration.
struct StageEstimate {
  double compute_s = 0;  ///< forward + backward of one micro-batch, slowest replica
  double forward_s = 0, backward_s = 0;
  double send_s = 0;                    ///< activation to the next stage + gradient back, per micro-batch
  double update_s = 0;                  ///< optimizer step, slowest replica
  double allreduce_s = 0;               ///< ring all-reduce of the stage's gradients
  double allreduce_exposed_s = 0;       ///< the part not hidden under the last backward
  double overhead_s = 0;                ///< the runtime's host work per micro-batch (the calibration's)
  int in_flight = 0;                    ///< micro-batches whose activations are kept (1F1B: P - i)
  std::vector<MemoryBreakdown> memory;  ///< per replica
  std::vector<double> capacity;         ///< per replica, bytes
};

/// Predictions for a plan.
struct Estimate {
  int microbatches = 0;
  double iteration_s = 0;
  double iterations_per_s = 0;
  double compute_usd = 0, egress_usd = 0;
  double usd_per_iteration() const { return compute_usd + egress_usd; }
  /// Energy of all the plan's GPUs over one iteration: each draws its idle
  /// power throughout and its busy power above that while it computes
  /// (forward, backward, exposed all-reduce, optimizer step); 0 when a GPU type's
  /// power is unknown (energy_known false).
  double energy_j = 0;
  bool energy_known = false;
  double busy_gpu_s = 0;  ///< GPU-seconds busy per iteration, all GPUs together
  double peak_memory_bytes = 0;
  bool fits = true;
  bool blocking_transfers = false;  ///< DeepSpeed: a transfer occupies both stages until it ends
  std::vector<StageEstimate> stages;
};

/// Simulates one iteration of `plan` (validated, nodes packed). InputError
/// when an input the plan needs is missing (a profile entry, a link fit).
Estimate estimate_plan(const Plan& plan, const PlannerInputs& inputs);

/// Draws one simulated iteration under 1F1B: a row per stage replica with
/// forward, backward, sends (receives too with blocking transfers), the
/// runtime's work per micro-batch, all-reduce and update.
void trace_plan(const Plan& plan, const Estimate& estimate, ChromeTrace& trace);

/// Predictions as JSON (for --json and the plan file).
nlohmann::json estimate_to_json(const Plan& plan, const Estimate& estimate);

}  // namespace fleet::sailor
