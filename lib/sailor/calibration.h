// Fitting the simulator's few free constants to measured runs, and judging
// it on runs it was not fitted to (leave-one-out). The runs file
// (docs/sailor-model.md, "Calibration"): {"format": "gpufleet-sailor-runs",
// "version": 1, "runs": [{"name", "plan": {a plan, either layout},
// "iteration_s", "peak_memory_gib", "source"}]}.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "sailor/estimator.h"
#include "sailor/plan.h"

namespace fleet::sailor {

/// One training run measured on real hardware.
struct MeasuredRun {
  std::string name;
  Plan plan;                     ///< validated, nodes packed
  double iteration_s = 0;        ///< measured seconds per iteration
  double peak_memory_bytes = 0;  ///< measured peak per GPU
};

/// Reads a runs file; every plan is validated against `inputs`. InputError
/// naming the run for a bad plan or a non-positive measurement.
std::vector<MeasuredRun> load_measured_runs(const std::filesystem::path& path, const PlannerInputs& inputs);

/// `inputs.calibration` with its fitted constants refitted to `runs`
/// (least squares of the relative error): the per-micro-batch overhead from
/// the times, bytes per activation float and the runtime overhead from the
/// peak memories (the parameter states are not fitted: their bytes per
/// parameter are facts of mixed-precision Adam). Each needs enough runs that
/// tell it apart (a pipeline for the overhead, two for memory); with fewer,
/// that constant keeps its value.
Calibration fit_calibration(const std::vector<MeasuredRun>& runs, const PlannerInputs& inputs);

/// A run predicted, and how far off (predicted / measured - 1).
struct RunPrediction {
  std::string name;
  double iteration_s = 0, peak_memory_bytes = 0;
  double time_error = 0, memory_error = 0;
};

/// Every run predicted with `inputs.calibration`.
std::vector<RunPrediction> predict_runs(const std::vector<MeasuredRun>& runs, const PlannerInputs& inputs);
/// Every run predicted with the constants fitted to all the *other* runs.
std::vector<RunPrediction> leave_one_out(const std::vector<MeasuredRun>& runs, const PlannerInputs& inputs);

/// Mean absolute relative error of time (memory: `memory` true).
double mean_abs_error(const std::vector<RunPrediction>& predictions, bool memory);

}  // namespace fleet::sailor
