#include "sailor-plan/commands.h"

#include <iostream>

#include <fmt/format.h>

#include "common/error.h"
#include "common/output_check.h"
#include "sailor/calibration.h"
#include "sailor-plan/plan_report.h"

namespace fleet::sailor {
namespace {

// What calibrate computed: the constants fitted to this model's runs, its
// runs predicted with the shipped constants, the fitted ones and
// leave-one-out, and another model's runs predicted with the fitted constants.
struct CalibrationOutcome {
  std::vector<MeasuredRun> runs;
  Calibration fitted;
  std::vector<RunPrediction> shipped, refit, held_out;
  std::optional<PlannerInputs> other_in;
  std::vector<MeasuredRun> other_measured;
  std::vector<RunPrediction> other_predicted;
};

CalibrationOutcome calibrate(const CalibrateCommand& c, const InputPaths& other,
                             const std::filesystem::path& other_runs) {
  CalibrationOutcome o;
  const PlannerInputs in = load_inputs(c.paths);
  o.runs = load_measured_runs(c.runs, in);
  PlannerInputs fitted = in;
  fitted.calibration = fit_calibration(o.runs, in);
  o.fitted = fitted.calibration;
  o.shipped = predict_runs(o.runs, in);
  o.refit = predict_runs(o.runs, fitted);
  o.held_out = leave_one_out(o.runs, in);
  // Another model's runs, predicted with the constants fitted to this one's:
  // how the simulator does on a model it was not calibrated on.
  if (!c.hold_out.empty()) {
    o.other_in = load_inputs(other);
    o.other_measured = load_measured_runs(other_runs, *o.other_in);
    o.other_in->calibration = o.fitted;
    o.other_predicted = predict_runs(o.other_measured, *o.other_in);
  }
  return o;
}

nlohmann::json hold_out_json(const CalibrationOutcome& o) {
  if (!o.other_in) return nullptr;
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < o.other_measured.size(); ++i)
    rows.push_back({{"name", o.other_measured[i].name},
                    {"measured_s", o.other_measured[i].iteration_s},
                    {"measured_bytes", o.other_measured[i].peak_memory_bytes},
                    {"predicted_s", o.other_predicted[i].iteration_s},
                    {"predicted_bytes", o.other_predicted[i].peak_memory_bytes}});
  return {{"model", o.other_in->model.name},
          {"runs", rows},
          {"mean_abs_error",
           {{"time", mean_abs_error(o.other_predicted, false)}, {"memory", mean_abs_error(o.other_predicted, true)}}}};
}

nlohmann::json calibration_json(const CalibrationOutcome& o) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < o.runs.size(); ++i)
    rows.push_back({{"name", o.runs[i].name},
                    {"measured_s", o.runs[i].iteration_s},
                    {"measured_bytes", o.runs[i].peak_memory_bytes},
                    {"shipped_s", o.shipped[i].iteration_s},
                    {"shipped_bytes", o.shipped[i].peak_memory_bytes},
                    {"fitted_s", o.refit[i].iteration_s},
                    {"fitted_bytes", o.refit[i].peak_memory_bytes},
                    {"held_out_s", o.held_out[i].iteration_s},
                    {"held_out_bytes", o.held_out[i].peak_memory_bytes}});
  const Calibration& f = o.fitted;
  return {{"fitted",
           {{"microbatch_overhead_s", f.microbatch_overhead_s},
            {"activation_bytes_per_float", f.activation_bytes_per_float},
            {"runtime_overhead_bytes", f.runtime_overhead_bytes}}},
          {"runs", rows},
          {"hold_out", hold_out_json(o)},
          {"mean_abs_error",
           {{"shipped_time", mean_abs_error(o.shipped, false)},
            {"shipped_memory", mean_abs_error(o.shipped, true)},
            {"fitted_time", mean_abs_error(o.refit, false)},
            {"fitted_memory", mean_abs_error(o.refit, true)},
            {"held_out_time", mean_abs_error(o.held_out, false)},
            {"held_out_memory", mean_abs_error(o.held_out, true)}}}};
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void print_calibration(std::ostream& report, const CalibrationOutcome& o) {
  const Calibration& f = o.fitted;
  const auto& runs = o.runs;
  report << fmt::format(
      "fitted to {} runs: {:.5f} s per micro-batch per stage, {:.3f} B per activation float, "
      "runtime overhead {:.2f} GB\n",
      runs.size(), f.microbatch_overhead_s, f.activation_bytes_per_float, f.runtime_overhead_bytes / 1e9);
  report << fmt::format("{:<28} {:>9} {:>9} {:>8} {:>9} {:>8}   {:>8} {:>8} {:>8} {:>8} {:>8}\n", "run", "meas s",
                        "shipped", "err", "held-out", "err", "meas GiB", "shipped", "err", "held-out", "err");
  for (std::size_t i = 0; i < runs.size(); ++i)
    report << fmt::format(
        "{:<28} {:>9.3f} {:>9.3f} {:>+7.1f}% {:>9.3f} {:>+7.1f}%   {:>8.2f} {:>8.2f} {:>+7.1f}% "
        "{:>8.2f} {:>+7.1f}%\n",
        runs[i].name, runs[i].iteration_s, o.shipped[i].iteration_s, 100 * o.shipped[i].time_error,
        o.held_out[i].iteration_s, 100 * o.held_out[i].time_error, runs[i].peak_memory_bytes / kGiB,
        o.shipped[i].peak_memory_bytes / kGiB, 100 * o.shipped[i].memory_error, o.held_out[i].peak_memory_bytes / kGiB,
        100 * o.held_out[i].memory_error);
  report << fmt::format(
      "mean absolute error: time {:.1f}% shipped, {:.1f}% held out (leave-one-out); memory {:.1f}% "
      "shipped, {:.1f}% held out\n",
      100 * mean_abs_error(o.shipped, false), 100 * mean_abs_error(o.held_out, false),
      100 * mean_abs_error(o.shipped, true), 100 * mean_abs_error(o.held_out, true));
}

void print_hold_out(std::ostream& report, const CalibrationOutcome& o) {
  if (!o.other_in) return;
  report << fmt::format("\nheld-out model {} ({} runs), predicted with the constants fitted above:\n",
                        o.other_in->model.name, o.other_measured.size());
  report << fmt::format("{:<28} {:>9} {:>9} {:>8}   {:>8} {:>8} {:>8}\n", "run", "meas s", "pred s", "err", "meas GiB",
                        "pred", "err");
  for (std::size_t i = 0; i < o.other_measured.size(); ++i)
    report << fmt::format("{:<28} {:>9.3f} {:>9.3f} {:>+7.1f}%   {:>8.2f} {:>8.2f} {:>+7.1f}%\n",
                          o.other_measured[i].name, o.other_measured[i].iteration_s, o.other_predicted[i].iteration_s,
                          100 * o.other_predicted[i].time_error, o.other_measured[i].peak_memory_bytes / kGiB,
                          o.other_predicted[i].peak_memory_bytes / kGiB, 100 * o.other_predicted[i].memory_error);
  report << fmt::format("mean absolute error on the held-out model: time {:.1f}%, memory {:.1f}%\n",
                        100 * mean_abs_error(o.other_predicted, false), 100 * mean_abs_error(o.other_predicted, true));
}

}  // namespace

int run_calibrate(const CalibrateCommand& c) {
  OutputCheck check;
  InputPaths other;
  other.inputs = c.hold_out;
  const std::filesystem::path other_runs =
      c.hold_out_runs.empty() && !c.hold_out.empty() ? c.hold_out / "measured_runs.json" : c.hold_out_runs;
  if (!c.hold_out_runs.empty() && c.hold_out.empty()) throw UsageError("--hold-out-runs needs --hold-out DIR");
  with_inputs(check, c.paths).input(c.runs, "--runs");
  if (!c.hold_out.empty()) with_inputs(check, other).input(other_runs, "--hold-out-runs");
  check.check(Existing::kReplace);
  std::ostream& report = report_stream(check);
  const CalibrationOutcome outcome = calibrate(c, other, other_runs);
  if (c.json) {
    report << calibration_json(outcome).dump(2) << "\n";
    return 0;
  }
  print_calibration(report, outcome);
  print_hold_out(report, outcome);
  return 0;
}

}  // namespace fleet::sailor
