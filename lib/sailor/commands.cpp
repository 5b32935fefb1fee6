#include "sailor/commands.h"

#include <chrono>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"
#include "common/output_check.h"
#include "sailor/calibration.h"
#include "sailor/estimator.h"
#include "sailor/import_sailor.h"
#include "sailor/model_from_config.h"
#include "sailor/placement.h"
#include "sailor/plan.h"
#include "sailor/search.h"

namespace fleet::sailor {

std::filesystem::path InputPaths::resolve(const std::filesystem::path& explicit_path, const char* name) const {
  if (!explicit_path.empty()) return explicit_path;
  if (inputs.empty()) throw UsageError(std::string("give --inputs DIR or --") + name);
  return inputs / (std::string(name) + ".json");
}

namespace {

// Registers the four planner inputs (and `plan`, when given) with `check`.
OutputCheck& with_inputs(OutputCheck& check, const InputPaths& p, const std::filesystem::path& plan = {}) {
  const std::pair<const char*, const std::filesystem::path*> parts[] = {
      {"model", &p.model}, {"profile", &p.profile}, {"cluster", &p.cluster}, {"job", &p.job}};
  for (const auto& [name, explicit_path] : parts) {
    if (!explicit_path->empty() || !p.inputs.empty())
      check.input(p.resolve(*explicit_path, name), std::string("--") + name);
  }
  return check.input(p.inputs, "--inputs").input(plan, "--plan");
}

Plan load_valid_plan(const std::filesystem::path& path, const PlannerInputs& in) {
  Plan plan = load_plan(path, in.job);
  try {
    validate_plan(plan, in.model, in.cluster);
    for (std::size_t i = 0; i < plan.stages.size(); ++i) {
      const Stage& s = plan.stages[i];
      for (const Replica& r : s.replicas) {
        if (!in.profiles.has(r.gpu, plan.mbs, s.tp_of(r))) {
          throw InputError(fmt::format("stage {}: the profile has no entry for {} with micro-batch size {} and TP {}",
                                       i, r.gpu, plan.mbs, s.tp_of(r)));
        }
      }
    }
  } catch (const InputError& e) {
    throw InputError(e.message(), {path.string(), e.context().field, std::nullopt});
  }
  pack_nodes(plan, in.cluster);
  return plan;
}

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / (1024.0 * 1024.0 * 1024.0)); }

std::pair<std::string, double> split_assignment(const std::string& text, const char* what) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError(std::string(what) + " must look like NAME=VALUE, got '" + text + "'");
  try {
    return {text.substr(0, eq), std::stod(text.substr(eq + 1))};
  } catch (const std::exception&) {
    throw UsageError(std::string(what) + ": '" + text.substr(eq + 1) + "' is not a number");
  }
}

// The human-readable report of a plan and its predictions.
std::string format_report(const Plan& plan, const Estimate& est) {
  std::string out;
  out += fmt::format("plan: {} stages x {} data-parallel, micro-batch {}, global batch {}, {} micro-batches, {} GPUs\n",
                     plan.stages.size(), plan.dp(), plan.mbs, plan.global_batch, est.microbatches, plan.gpus());
  out += fmt::format("{:<5} {:>9} {:>3} {:<16} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9} {:>5}\n", "stage", "layers", "tp",
                     "replicas", "fwd+bwd s", "send s", "allred s", "update s", "mem GiB", "cap GiB", "fits");
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const Stage& s = plan.stages[i];
    const StageEstimate& se = est.stages[i];
    std::size_t worst = 0;
    for (std::size_t r = 0; r < se.memory.size(); ++r) {
      if (se.memory[r].total() / se.capacity[r] > se.memory[worst].total() / se.capacity[worst]) worst = r;
    }
    // Replicas by kind; a stage whose replicas differ in TP names each kind's degree.
    const bool uniform = s.uniform_tp();
    std::map<std::string, int> kinds;
    for (const Replica& r : s.replicas) ++kinds[uniform ? r.gpu : fmt::format("{}/tp{}", r.gpu, s.tp_of(r))];
    std::string replicas;
    for (const auto& [kind, n] : kinds) replicas += (replicas.empty() ? "" : "+") + std::to_string(n) + "x" + kind;
    out += fmt::format("{:<5} {:>9} {:>3} {:<16} {:>10.4f} {:>9.4f} {:>10.4f} {:>9.4f} {:>9} {:>9} {:>5}\n", i,
                       fmt::format("{}-{}", s.first_layer, s.last_layer - 1),
                       uniform ? std::to_string(s.tp) : std::string("mix"), replicas, se.compute_s, se.send_s,
                       se.allreduce_s, se.update_s, gib(se.memory[worst].total()), gib(se.capacity[worst]),
                       se.memory[worst].total() <= se.capacity[worst] ? "yes" : "NO");
  }
  // Where traffic crosses zones (slow links, billed as egress).
  const std::vector<StagePlacement> placement = describe_placement(plan);
  for (std::size_t i = 0; i < placement.size(); ++i) {
    const StagePlacement& p = placement[i];
    std::string links = fmt::format("ring {} of {} links across zones", p.ring_links_across_zones,
                                    plan.stages[i].replicas.size() > 1 ? plan.stages[i].replicas.size() : 0);
    if (i + 1 < placement.size()) {
      links += fmt::format(", to stage {}: {} of {} across zones", i + 1, p.pipeline_links_across_zones,
                           plan.stages[i].replicas.size());
    }
    out += fmt::format("stage {} zones: {} ({})\n", i, zones_text(p), links);
  }
  out += fmt::format("iteration: {:.4f} s ({:.3f} iterations/s, {:.1f} samples/s)\n", est.iteration_s,
                     est.iterations_per_s, est.iterations_per_s * plan.global_batch);
  out += fmt::format("cost: ${:.5f} per iteration (compute ${:.5f}, egress ${:.5f})\n", est.usd_per_iteration(),
                     est.compute_usd, est.egress_usd);
  if (est.energy_known) {
    out +=
        fmt::format("energy: {:.1f} kJ per iteration ({:.0f} W on average over {} GPUs, busy {:.0f} % of the time)\n",
                    est.energy_j / 1e3, est.energy_j / est.iteration_s, plan.gpus(),
                    100 * est.busy_gpu_s / (est.iteration_s * plan.gpus()));
  } else {
    out += "energy: unknown (cluster.json gives no idle_watts / busy_watts for a GPU type of the plan)\n";
  }
  out += fmt::format("memory: peak {} GiB per GPU; {}\n", gib(est.peak_memory_bytes),
                     est.fits ? "every GPU fits" : "SOME GPUs DO NOT FIT");
  return out;
}

}  // namespace

PlannerInputs load_inputs(const InputPaths& p) {
  PlannerInputs in;
  in.model = load_model_spec(p.resolve(p.model, "model"));
  in.profiles = load_profile_set(p.resolve(p.profile, "profile"));
  in.cluster = load_cluster_spec(p.resolve(p.cluster, "cluster"));
  in.job = load_job_spec(p.resolve(p.job, "job"));
  if (in.profiles.model != in.model.name) {
    throw InputError("profile is for model '" + in.profiles.model + "' but the model is '" + in.model.name + "'");
  }
  if (in.job.model != in.model.name) {
    throw InputError("job is for model '" + in.job.model + "' but the model is '" + in.model.name + "'");
  }
  for (const std::string& note : complete_profiles(in.profiles, in.model)) spdlog::warn("{}", note);
  if (const auto note = monotone_in_batch_size(in.profiles)) spdlog::debug("{}", *note);
  return in;
}

int run_import_hf(const ImportHfCommand& c) {
  auto file = !is_stdio(c.config) && std::filesystem::is_directory(c.config) ? c.config / "config.json" : c.config;
  OutputCheck check;
  check.input(file, "config").file(c.output, "--output").check(Existing::kReplace);
  if (c.sequence_length <= 0) throw UsageError("--seq-len must be positive");
  auto doc = load_json_file(file);
  std::string name = !c.name.empty()  ? c.name
                     : is_stdio(file) ? std::string("model")
                                      : std::filesystem::absolute(file).parent_path().filename().string();
  auto model =
      model_spec_from_hf_config(doc.root(), c.sequence_length, default_calibration().activation_bytes_per_float, name);
  write_json_file(c.output, to_json(model));
  double params = 0;
  for (const auto& layer : model.layers) params += layer.params.at(1);
  spdlog::info("wrote {}: {} layers, {:.1f} M parameters, sequence length {}", c.output.string(), model.layers.size(),
               params / 1e6, c.sequence_length);
  return 0;
}

int run_import(const ImportCommand& c) {
  ImportOptions opt;
  opt.source = c.source;
  opt.model = c.model;
  opt.global_batch = c.global_batch;
  opt.sequence_length = c.sequence_length;
  for (const std::string& p : c.prices) {
    const auto [gpu, usd] = split_assignment(p, "--price");
    if (!(usd >= 0 && usd <= 1e6)) throw UsageError("--price " + gpu + ": must be between 0 and 1000000 $/hour");
    opt.prices[gpu] = usd;
  }
  for (const std::string& q : c.quotas) {
    const auto [key, n] = split_assignment(q, "--quota");
    const auto at = key.find('@');
    if (at == std::string::npos) throw UsageError("--quota must look like GPU@ZONE=N, got '" + q + "'");
    if (!(n >= 0 && n <= 1e6) || n != static_cast<double>(static_cast<int>(n))) {
      throw UsageError("--quota " + key + ": the GPU count must be a whole number between 0 and 1000000");
    }
    opt.extra_quotas[key.substr(0, at)][key.substr(at + 1)] = static_cast<int>(n);
  }
  // The four files go into the output folder, which is made when missing.
  std::error_code ec;
  const bool folder_exists = std::filesystem::is_directory(c.output_dir, ec);
  OutputCheck check;
  check.input(c.source, "source");
  if (folder_exists) {
    for (const char* f : {"model.json", "profile.json", "cluster.json", "job.json"})
      check.file(c.output_dir / f, "--output");
  } else {
    check.folder(c.output_dir, "--output");
  }
  check.check(Existing::kReplace);
  const ImportedInputs in = import_sailor(opt);
  if (!folder_exists && !std::filesystem::create_directory(c.output_dir, ec)) {
    throw IoError("cannot create folder: " + ec.message(), {c.output_dir.string(), "", std::nullopt});
  }
  auto text = [](const nlohmann::json& j) { return j.dump(2) + "\n"; };
  write_files_atomically({{c.output_dir / "model.json", text(to_json(in.model))},
                          {c.output_dir / "profile.json", text(to_json(in.profiles))},
                          {c.output_dir / "cluster.json", text(to_json(in.cluster))},
                          {c.output_dir / "job.json", text(to_json(in.job))}});
  int gpus = 0;
  for (const auto& [gpu, zones] : in.cluster.quotas) {
    for (const auto& [zone, n] : zones) gpus += n;
  }
  spdlog::info("imported {} ({} layers, profiles for {} GPU types), a cluster of {} GPUs in {} zones into {}",
               in.model.name, in.model.layers.size(), in.profiles.gpus.size(), gpus, in.cluster.zone_region.size(),
               c.output_dir.string());
  return 0;
}

int run_simulate(const SimulateCommand& c) {
  OutputCheck check;
  with_inputs(check, c.paths, c.plan).file(c.trace.value_or(""), "--trace").check(Existing::kReplace);
  std::ostream& report = report_stream(check);
  const PlannerInputs in = load_inputs(c.paths);
  const Plan plan = load_valid_plan(c.plan, in);
  const Estimate est = estimate_plan(plan, in);
  if (c.trace) {
    ChromeTrace trace;
    trace_plan(plan, est, trace);
    trace.write(*c.trace);
  }
  if (c.json) {
    report << estimate_to_json(plan, est).dump(2) << "\n";
    return 0;
  }
  report << format_report(plan, est);
  return 0;
}

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

int run_search(const SearchCommand& c) {
  SearchOptions opt =
      search_options(c.objective, c.max_cost_per_iter, c.min_throughput, c.max_gpus, c.max_energy_per_iter);
  if (c.max_stages < 1) throw UsageError("--max-stages must be at least 1");
  OutputCheck check;
  with_inputs(check, c.paths).file(c.output.value_or(""), "--output").check(Existing::kReplace);
  std::ostream& report = report_stream(check);
  opt.top_k = c.top;
  opt.exhaustive = c.exhaustive;
  opt.max_stages = c.max_stages;
  const PlannerInputs in = load_inputs(c.paths);
  SearchStats stats;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<RankedPlan> top = search_plans(in, opt, &stats);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info(
      "searched {} plans in {:.3f} s ({} did not fit in memory, {} outside the bounds; {} configurations "
      "skipped by their bound)",
      stats.candidates, seconds, stats.memory_rejected, stats.constraint_rejected, stats.bound_pruned);
  if (c.output) {
    nlohmann::json out = plan_to_json(top.front().plan);
    out["predictions"] = estimate_to_json(top.front().plan, top.front().estimate);
    write_json_file(*c.output, out);
  }
  if (c.json) {
    nlohmann::json plans = nlohmann::json::array();
    for (const RankedPlan& r : top) {
      nlohmann::json p = plan_to_json(r.plan);
      p["predictions"] = estimate_to_json(r.plan, r.estimate);
      plans.push_back(p);
    }
    report << nlohmann::json{{"plans", plans}, {"searched", stats.candidates}, {"search_s", seconds}}.dump(2) << "\n";
    return 0;
  }
  report << "best plan (" << c.objective << "):\n" << format_report(top.front().plan, top.front().estimate);
  if (top.size() > 1) {
    report << fmt::format("\n{:>4} {:>7} {:>4} {:>3} {:>4} {:>5} {:>12} {:>12}  {}\n", "rank", "stages", "dp", "tp",
                          "mbs", "GPUs", "iter/s", "$/iter", "GPU types per stage");
    for (std::size_t i = 0; i < top.size(); ++i) {
      const RankedPlan& r = top[i];
      std::string types;
      for (const Stage& s : r.plan.stages) types += (types.empty() ? "" : ",") + s.replicas.front().gpu;
      report << fmt::format("{:>4} {:>7} {:>4} {:>3} {:>4} {:>5} {:>12.4f} {:>12.5f}  {}\n", i + 1,
                            r.plan.stages.size(), r.plan.dp(), r.plan.stages.front().tp, r.plan.mbs, r.plan.gpus(),
                            r.estimate.iterations_per_s, r.estimate.usd_per_iteration(), types);
    }
  }
  return 0;
}

int run_export(const ExportCommand& c) {
  OutputCheck check;
  with_inputs(check, c.paths, c.plan).file(c.output, "--output").check(Existing::kReplace);
  if (c.format != "sailor" && c.format != "gpufleet")
    throw UsageError("unknown --format '" + c.format + "' (sailor or gpufleet)");
  const PlannerInputs in = load_inputs(c.paths);
  const Plan plan = load_valid_plan(c.plan, in);
  if (c.format == "sailor") {
    write_json_file(c.output, plan_to_sailor_json(plan, in.cluster));
  } else if (c.format == "gpufleet") {
    nlohmann::json out = plan_to_json(plan);
    out["predictions"] = estimate_to_json(plan, estimate_plan(plan, in));
    write_json_file(c.output, out);
  } else {
    throw UsageError("unknown --format '" + c.format + "' (sailor or gpufleet)");
  }
  return 0;
}

}  // namespace fleet::sailor
