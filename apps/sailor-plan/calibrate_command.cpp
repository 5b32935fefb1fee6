#include "sailor-plan/commands.h"

#include <iostream>

#include <fmt/format.h>

#include "common/error.h"
#include "common/output_check.h"
#include "sailor/calibration.h"
#include "sailor-plan/plan_report.h"

namespace fleet::sailor {
namespace {

nlohmann::json hold_out_json(const std::optional<PlannerInputs>& in, const std::vector<MeasuredRun>& runs,
                             const std::vector<RunPrediction>& predicted) {
  if (!in) return nullptr;
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < runs.size(); ++i)
    rows.push_back({{"name", runs[i].name},
                    {"measured_s", runs[i].iteration_s},
                    {"measured_bytes", runs[i].peak_memory_bytes},
                    {"predicted_s", predicted[i].iteration_s},
                    {"predicted_bytes", predicted[i].peak_memory_bytes}});
  return {
      {"model", in->model.name},
      {"runs", rows},
      {"mean_abs_error", {{"time", mean_abs_error(predicted, false)}, {"memory", mean_abs_error(predicted, true)}}}};
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
  const PlannerInputs in = load_inputs(c.paths);
  const std::vector<MeasuredRun> runs = load_measured_runs(c.runs, in);
  PlannerInputs fitted = in;
  fitted.calibration = fit_calibration(runs, in);
  const auto shipped = predict_runs(runs, in);
  const auto refit = predict_runs(runs, fitted);
  const auto held_out = leave_one_out(runs, in);
  const Calibration& f = fitted.calibration;
  // Another model's runs, predicted with the constants fitted to this one's:
  // how the simulator does on a model it was not calibrated on.
  std::optional<PlannerInputs> other_in;
  std::vector<MeasuredRun> other_measured;
  std::vector<RunPrediction> other_predicted;
  if (!c.hold_out.empty()) {
    other_in = load_inputs(other);
    other_measured = load_measured_runs(other_runs, *other_in);
    other_in->calibration = f;
    other_predicted = predict_runs(other_measured, *other_in);
  }
  if (c.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < runs.size(); ++i)
      rows.push_back({{"name", runs[i].name},
                      {"measured_s", runs[i].iteration_s},
                      {"measured_bytes", runs[i].peak_memory_bytes},
                      {"shipped_s", shipped[i].iteration_s},
                      {"shipped_bytes", shipped[i].peak_memory_bytes},
                      {"fitted_s", refit[i].iteration_s},
                      {"fitted_bytes", refit[i].peak_memory_bytes},
                      {"held_out_s", held_out[i].iteration_s},
                      {"held_out_bytes", held_out[i].peak_memory_bytes}});
    report << nlohmann::json{{"fitted",
                              {{"microbatch_overhead_s", f.microbatch_overhead_s},
                               {"activation_bytes_per_float", f.activation_bytes_per_float},
                               {"runtime_overhead_bytes", f.runtime_overhead_bytes}}},
                             {"runs", rows},
                             {"hold_out", hold_out_json(other_in, other_measured, other_predicted)},
                             {"mean_abs_error",
                              {{"shipped_time", mean_abs_error(shipped, false)},
                               {"shipped_memory", mean_abs_error(shipped, true)},
                               {"fitted_time", mean_abs_error(refit, false)},
                               {"fitted_memory", mean_abs_error(refit, true)},
                               {"held_out_time", mean_abs_error(held_out, false)},
                               {"held_out_memory", mean_abs_error(held_out, true)}}}}
                  .dump(2)
           << "\n";
    return 0;
  }
  const double gib = 1024.0 * 1024.0 * 1024.0;
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
        runs[i].name, runs[i].iteration_s, shipped[i].iteration_s, 100 * shipped[i].time_error, held_out[i].iteration_s,
        100 * held_out[i].time_error, runs[i].peak_memory_bytes / gib, shipped[i].peak_memory_bytes / gib,
        100 * shipped[i].memory_error, held_out[i].peak_memory_bytes / gib, 100 * held_out[i].memory_error);
  report << fmt::format(
      "mean absolute error: time {:.1f}% shipped, {:.1f}% held out (leave-one-out); memory {:.1f}% "
      "shipped, {:.1f}% held out\n",
      100 * mean_abs_error(shipped, false), 100 * mean_abs_error(held_out, false), 100 * mean_abs_error(shipped, true),
      100 * mean_abs_error(held_out, true));
  if (other_in) {
    report << fmt::format("\nheld-out model {} ({} runs), predicted with the constants fitted above:\n",
                          other_in->model.name, other_measured.size());
    report << fmt::format("{:<28} {:>9} {:>9} {:>8}   {:>8} {:>8} {:>8}\n", "run", "meas s", "pred s", "err",
                          "meas GiB", "pred", "err");
    for (std::size_t i = 0; i < other_measured.size(); ++i)
      report << fmt::format("{:<28} {:>9.3f} {:>9.3f} {:>+7.1f}%   {:>8.2f} {:>8.2f} {:>+7.1f}%\n",
                            other_measured[i].name, other_measured[i].iteration_s, other_predicted[i].iteration_s,
                            100 * other_predicted[i].time_error, other_measured[i].peak_memory_bytes / gib,
                            other_predicted[i].peak_memory_bytes / gib, 100 * other_predicted[i].memory_error);
    report << fmt::format("mean absolute error on the held-out model: time {:.1f}%, memory {:.1f}%\n",
                          100 * mean_abs_error(other_predicted, false), 100 * mean_abs_error(other_predicted, true));
  }
  return 0;
}

}  // namespace fleet::sailor
