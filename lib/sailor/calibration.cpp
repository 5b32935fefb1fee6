#include "sailor/calibration.h"

#include <array>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "common/json.h"

namespace fleet::sailor {

std::vector<MeasuredRun> load_measured_runs(const std::filesystem::path& path, const PlannerInputs& inputs) {
  const JsonDocument doc = load_json_file(path);
  const JsonValue root = doc.root();
  if (root.get<std::string>("format") != "gpufleet-sailor-runs")
    root.at("format").fail("expected format 'gpufleet-sailor-runs'");
  if (root.get<int>("version") != 1) root.at("version").fail("unsupported version (this build reads 1)");
  std::vector<MeasuredRun> runs;
  for (const JsonValue& r : root.at("runs").elements()) {
    r.reject_unknown_keys({"name", "plan", "iteration_s", "peak_memory_gib", "source"});
    MeasuredRun run;
    run.name = r.get<std::string>("name");
    run.plan = plan_from_json(r.at("plan"), inputs.job);
    try {
      validate_plan(run.plan, inputs.model, inputs.cluster);
    } catch (const InputError& e) {
      r.at("plan").fail(fmt::format("run '{}': {}", run.name, e.what()));
    }
    pack_nodes(run.plan, inputs.cluster);
    run.iteration_s = r.get<double>("iteration_s");
    if (!(run.iteration_s > 0)) r.at("iteration_s").fail("must be positive seconds");
    const double gib = r.get<double>("peak_memory_gib");
    if (!(gib > 0)) r.at("peak_memory_gib").fail("must be positive GiB");
    run.peak_memory_bytes = gib * 1024.0 * 1024.0 * 1024.0;
    runs.push_back(std::move(run));
  }
  if (runs.empty()) root.at("runs").fail("lists no run");
  return runs;
}

namespace {

// The GPU with the most memory in a plan, split into its parameter states
// (bytes, not fitted) and what each fitted memory constant multiplies:
// activation floats (x bytes per float) and 1 GB (x runtime overhead in GB).
std::array<double, 3> memory_terms(const Estimate& e, const Calibration& cal) {
  const MemoryBreakdown* peak = nullptr;
  for (const StageEstimate& s : e.stages)
    for (const MemoryBreakdown& m : s.memory)
      if (peak == nullptr || m.total() > peak->total()) peak = &m;
  // The overhead in GB, so that the columns of the fit are of similar size.
  if (peak == nullptr) return {0, 0, 1e9};
  return {peak->weights + peak->gradients + peak->optimizer, peak->activations / cal.activation_bytes_per_float, 1e9};
}

// Solves the n x n system a x = b (Gaussian elimination, partial pivoting);
// false when it is singular.
template <std::size_t N>
bool solve(std::array<std::array<double, N>, N> a, std::array<double, N> b, std::array<double, N>& x) {
  for (std::size_t c = 0; c < N; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < N; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    if (std::fabs(a[pivot][c]) < 1e-12) return false;
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    for (std::size_t r = c + 1; r < N; ++r) {
      const double f = a[r][c] / a[c][c];
      for (std::size_t k = c; k < N; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (std::size_t c = N; c-- > 0;) {
    double v = b[c];
    for (std::size_t k = c + 1; k < N; ++k) v -= a[c][k] * x[k];
    x[c] = v / a[c][c];
  }
  return true;
}

}  // namespace

Calibration fit_calibration(const std::vector<MeasuredRun>& runs, const PlannerInputs& inputs) {
  PlannerInputs in = inputs;
  Calibration& cal = in.calibration;
  // Time: the overhead adds to every stage's slot, so the iteration grows by
  // it once per slot on the critical path, (micro-batches - 1) + stages:
  // T = T(0) + o k, linear in o.
  cal.microbatch_overhead_s = 0;
  double num = 0, den = 0;
  for (const MeasuredRun& r : runs) {
    const Estimate e = estimate_plan(r.plan, in);
    const double k = (e.microbatches - 1) + static_cast<double>(r.plan.stages.size());
    num += k / r.iteration_s * (1 - e.iteration_s / r.iteration_s);
    den += (k / r.iteration_s) * (k / r.iteration_s);
  }
  cal.microbatch_overhead_s = den > 0 ? std::max(0.0, num / den) : inputs.calibration.microbatch_overhead_s;

  // Memory: M - states = floats a + O, linear in (a, O); the states' bytes
  // per parameter are facts, not fitted (a factor on them, fitted to one
  // model whose states are a few GB, grew with the next model's parameters
  // where the measured framework buffers do not). The GPU with the peak can
  // change with the constants: refit a few times.
  if (runs.size() >= 2) {
    for (int round = 0; round < 3; ++round) {
      std::array<std::array<double, 2>, 2> ata{};
      std::array<double, 2> atb{};
      for (const MeasuredRun& r : runs) {
        const auto t = memory_terms(estimate_plan(r.plan, in), cal);
        const std::array<double, 2> u{t[1] / r.peak_memory_bytes, t[2] / r.peak_memory_bytes};
        const double y = 1 - t[0] / r.peak_memory_bytes;
        for (std::size_t i = 0; i < 2; ++i) {
          for (std::size_t j = 0; j < 2; ++j) ata[i][j] += u[i] * u[j];
          atb[i] += u[i] * y;
        }
      }
      std::array<double, 2> x{};
      if (!solve(ata, atb, x)) break;
      cal.activation_bytes_per_float = x[0];
      cal.runtime_overhead_bytes = x[1] * 1e9;
    }
  }
  return cal;
}

std::vector<RunPrediction> predict_runs(const std::vector<MeasuredRun>& runs, const PlannerInputs& inputs) {
  std::vector<RunPrediction> out;
  for (const MeasuredRun& r : runs) {
    const Estimate e = estimate_plan(r.plan, inputs);
    out.push_back({r.name, e.iteration_s, e.peak_memory_bytes, e.iteration_s / r.iteration_s - 1,
                   e.peak_memory_bytes / r.peak_memory_bytes - 1});
  }
  return out;
}

std::vector<RunPrediction> leave_one_out(const std::vector<MeasuredRun>& runs, const PlannerInputs& inputs) {
  std::vector<RunPrediction> out;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::vector<MeasuredRun> others;
    for (std::size_t j = 0; j < runs.size(); ++j)
      if (j != i) others.push_back(runs[j]);
    PlannerInputs in = inputs;
    in.calibration = fit_calibration(others, inputs);
    out.push_back(predict_runs({runs[i]}, in).front());
  }
  return out;
}

double mean_abs_error(const std::vector<RunPrediction>& predictions, bool memory) {
  if (predictions.empty()) return 0;
  double sum = 0;
  for (const RunPrediction& p : predictions) sum += std::fabs(memory ? p.memory_error : p.time_error);
  return sum / static_cast<double>(predictions.size());
}

}  // namespace fleet::sailor
