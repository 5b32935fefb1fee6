// Input formats, bad input, the import of SAILOR's files, the SAILOR plan
// layout round trip, and the calibration against measured GH200 runs.
#include <gtest/gtest.h>

#include <cmath>

#include "common/atomic_file.h"
#include "common/chrome_trace.h"
#include "common/error.h"
#include "common/json.h"
#include "sailor/calibration.h"
#include "sailor/planner_inputs.h"
#include "sailor/import_sailor.h"
#include "sailor/search.h"
#include "sailor_fixtures.h"
#include "test_util.h"

namespace fleet::sailor {
namespace {

using fleet::testing::error_of;
namespace fs = std::filesystem;

const fs::path kExamples = fs::path(FLEET_SOURCE_DIR) / "examples" / "sailor";
const fs::path kReference = fs::path(FLEET_SOURCE_DIR) / "examples" / "sailor" / "sailor-data";

PlannerInputs example_inputs(const std::string& model) {
  PlannerInputs in;
  in.model = load_model_spec(kExamples / model / "model.json");
  in.profiles = load_profile_set(kExamples / model / "profile.json");
  in.cluster = load_cluster_spec(kExamples / model / "cluster.json");
  in.job = load_job_spec(kExamples / model / "job.json");
  return in;
}

Estimate estimate_file(const fs::path& plan_path, const PlannerInputs& in) {
  Plan plan = load_plan(plan_path, in.job);
  validate_plan(plan, in.model, in.cluster);
  pack_nodes(plan, in.cluster);
  return estimate_plan(plan, in);
}

TEST(SailorInputs, TheDrawnIterationOfEveryExamplePlanEndsAtItsPredictedTime) {
  // sailor-plan simulate --trace, on the inputs as the CLI reads them: the
  // drawn 1F1B schedule, with the runtime's work per micro-batch and
  // DeepSpeed's blocking transfers drawn, ends where the prediction does.
  InputPaths paths;
  paths.inputs = kExamples / "opt-350";
  const PlannerInputs in = load_inputs(paths);
  int plans = 0;
  for (const auto& entry : fs::directory_iterator(kExamples / "plans")) {
    if (entry.path().filename().string().rfind("opt350_", 0) != 0) continue;
    Plan plan = load_plan(entry.path(), in.job);
    validate_plan(plan, in.model, in.cluster);
    pack_nodes(plan, in.cluster);
    const Estimate e = estimate_plan(plan, in);
    ChromeTrace trace;
    trace_plan(plan, e, trace);
    double last_end = 0;
    const nlohmann::json drawn = trace.to_json();
    for (const auto& ev : drawn["traceEvents"]) {
      if (ev["ph"] == "X") last_end = std::max(last_end, ev["ts"].get<double>() + ev["dur"].get<double>());
    }
    EXPECT_NEAR(last_end / 1e6, e.iteration_s, 0.015 * e.iteration_s) << entry.path();
    ++plans;
  }
  EXPECT_EQ(plans, 4);
}

TEST(SailorInputs, CalibratedAgainstTheGh200Measurements) {
  // OPT-350 on GH200 nodes of 4 GPUs, TP 4: eight runs measured by SAILOR's
  // authors, read as the CLI reads them (profiles made monotone in the batch).
  InputPaths paths;
  paths.inputs = kExamples / "opt-350";
  const PlannerInputs in = load_inputs(paths);
  const auto runs = load_measured_runs(kExamples / "opt-350" / "measured_runs.json", in);
  ASSERT_EQ(runs.size(), 8u);
  // The shipped constants are the fit to these runs, not stale numbers.
  const Calibration fit = fit_calibration(runs, in);
  EXPECT_NEAR(fit.microbatch_overhead_s / in.calibration.microbatch_overhead_s, 1.0, 0.01);
  EXPECT_NEAR(fit.activation_bytes_per_float / in.calibration.activation_bytes_per_float, 1.0, 0.01);
  EXPECT_NEAR(fit.runtime_overhead_bytes / in.calibration.runtime_overhead_bytes, 1.0, 0.01);
  // Judged on what it was not fitted to: each run predicted with the
  // constants fitted to the other seven (docs/sailor-model.md has the table).
  const auto held_out = leave_one_out(runs, in);
  // Memory has two fitted constants (bytes per activation float, runtime
  // overhead); the parameter states are counted, not fitted, which costs a
  // little here and holds on a larger model (docs/sailor-model.md).
  EXPECT_LT(mean_abs_error(held_out, false), 0.05);
  EXPECT_LT(mean_abs_error(held_out, true), 0.03);
  for (const RunPrediction& p : held_out) {
    EXPECT_LT(std::fabs(p.time_error), 0.17) << p.name;
    EXPECT_LT(std::fabs(p.memory_error), 0.065) << p.name;
  }
  for (const RunPrediction& p : predict_runs(runs, in)) {
    EXPECT_LT(std::fabs(p.time_error), 0.15) << p.name;
    EXPECT_LT(std::fabs(p.memory_error), 0.04) << p.name;
  }
}

TEST(SailorInputs, SailorsBestPlansSimulateAndOursAreAtLeastAsFast) {
  // The plan SAILOR's own planner ranks first in ten scenarios (one zone):
  // they mix TP degrees and GPU types inside a stage. Every one must load
  // and simulate, and our search's best must be at least as fast by the
  // same simulator.
  struct Scenario {
    const char* file;
    const char* model;
    int a100, v100;
  };
  const Scenario scenarios[] = {{"opt_a32_v96", "opt-350", 32, 96},       {"opt_a80_v240", "opt-350", 80, 240},
                                {"opt_a128_v384", "opt-350", 128, 384},   {"opt_a32", "opt-350", 32, 0},
                                {"opt_a128", "opt-350", 128, 0},          {"neo_a32_v96", "gpt-neo-2.7", 32, 96},
                                {"neo_a80_v240", "gpt-neo-2.7", 80, 240}, {"neo_a128_v384", "gpt-neo-2.7", 128, 384},
                                {"neo_a32", "gpt-neo-2.7", 32, 0},        {"neo_a128", "gpt-neo-2.7", 128, 0}};
  int mixed_tp = 0;
  for (const Scenario& sc : scenarios) {
    InputPaths paths;
    paths.inputs = kExamples / sc.model;
    PlannerInputs in = load_inputs(paths);
    in.cluster.quotas.clear();
    in.cluster.quotas["A100-40"]["us-central1-a"] = sc.a100;
    if (sc.v100 > 0) in.cluster.quotas["V100-16"]["us-central1-a"] = sc.v100;
    Plan theirs = load_plan(kReference / "best_plans" / (std::string(sc.file) + ".json"), in.job);
    for (const Stage& s : theirs.stages) mixed_tp += s.uniform_tp() ? 0 : 1;
    ASSERT_NO_THROW(validate_plan(theirs, in.model, in.cluster)) << sc.file;
    pack_nodes(theirs, in.cluster);
    const Estimate their_estimate = estimate_plan(theirs, in);
    const Estimate ours = search_plans(in, SearchOptions{}).front().estimate;
    EXPECT_GE(ours.iterations_per_s, their_estimate.iterations_per_s) << sc.file;
  }
  EXPECT_GT(mixed_tp, 0);  // the point of the test: stages whose replicas differ in TP
}

TEST(SailorInputs, MeasuredRunsFilesAreChecked) {
  fleet::testing::TempDir dir;
  InputPaths paths;
  paths.inputs = kExamples / "opt-350";
  const PlannerInputs in = load_inputs(paths);
  const nlohmann::json plan = {
      {"format", "gpufleet-sailor-plan"},
      {"version", 1},
      {"mbs", 8},
      {"global_batch", 32},
      {"stages", {{{"layers", {0, 26}}, {"tp", 4}, {"replicas", {{{"gpu", "GH-96"}, {"zone", "us-central1-a"}}}}}}}};
  auto error = [&](nlohmann::json run) {
    write_json_file(dir / "runs.json", {{"format", "gpufleet-sailor-runs"}, {"version", 1}, {"runs", {run}}});
    return error_of([&] { load_measured_runs(dir / "runs.json", in); });
  };
  nlohmann::json good = {{"name", "one"}, {"plan", plan}, {"iteration_s", 1.0}, {"peak_memory_gib", 20.0}};
  EXPECT_EQ(error(good), "no error");
  auto bad = good;
  bad["iteration_s"] = -1.0;
  EXPECT_NE(error(bad).find("must be positive seconds"), std::string::npos) << error(bad);
  bad = good;
  bad["plan"]["stages"][0]["layers"] = {0, 20};
  EXPECT_NE(error(bad).find("run 'one'"), std::string::npos) << error(bad);
  bad = good;
  bad["peak_memory"] = 3;
  EXPECT_NE(error(bad).find("peak_memory"), std::string::npos) << error(bad);
}

TEST(SailorInputs, SailorLayoutRoundTrip) {
  fleet::testing::TempDir dir;
  const PlannerInputs in = example_inputs("opt-350");
  const fs::path original = kExamples / "plans" / "opt350_a100_v100_two_zones.json";
  Plan plan = load_plan(original, in.job);
  write_json_file(dir / "sailor.json", plan_to_sailor_json(plan, in.cluster));
  const JsonDocument doc = load_json_file(dir / "sailor.json");
  EXPECT_EQ(doc.root().at("pipeline_list").at(0).get<int>("num_stages"), 2);
  EXPECT_EQ(doc.root().at("pipeline_list").at(0).at("tmp_per_stage").at(1).at(1).at(0).at(0).at(2).as<std::string>(),
            "us-central1-b");
  const Estimate a = estimate_file(original, in), b = estimate_file(dir / "sailor.json", in);
  EXPECT_DOUBLE_EQ(a.iteration_s, b.iteration_s);
  EXPECT_DOUBLE_EQ(a.usd_per_iteration(), b.usd_per_iteration());
  EXPECT_GT(a.egress_usd, 0.0);  // a stage-1 replica sits in another zone
}

TEST(SailorInputs, ImportReproducesTheShippedExamples) {
  for (const auto& [model, folder] :
       {std::pair<std::string, std::string>{"OPT-350", "opt-350"}, {"GPT-Neo-2.7", "gpt-neo-2.7"}}) {
    ImportOptions opt;
    opt.source = kReference;
    opt.model = model;
    if (model == "OPT-350") opt.extra_quotas["GH-96"]["us-central1-a"] = 128;
    const ImportedInputs imported = import_sailor(opt);
    EXPECT_EQ(to_json(imported.model), load_json_file(kExamples / folder / "model.json").json()) << model;
    EXPECT_EQ(to_json(imported.profiles), load_json_file(kExamples / folder / "profile.json").json()) << model;
    EXPECT_EQ(to_json(imported.cluster), load_json_file(kExamples / folder / "cluster.json").json()) << model;
    EXPECT_EQ(to_json(imported.job), load_json_file(kExamples / folder / "job.json").json()) << model;
  }
  const PlannerInputs neo = example_inputs("gpt-neo-2.7");
  EXPECT_EQ(neo.model.layers.size(), 34u);
  EXPECT_EQ(neo.job.global_batch, 2048);
  EXPECT_DOUBLE_EQ(neo.cluster.gpu_types.at("V100-16").price_per_hour, 2.80);
  EXPECT_EQ(neo.cluster.quotas.at("A100-40").at("us-west1-b"), 100);
  EXPECT_EQ(neo.cluster.link_between("us-central1-a", "us-west1-b"), LinkClass::kCrossRegion);
  EXPECT_DOUBLE_EQ(neo.cluster.egress_per_gb.at(LinkClass::kCrossRegion), 0.02);
}

TEST(SailorInputs, SpecsRoundTripThroughJson) {
  fleet::testing::TempDir dir;
  const PlannerInputs in = testing::tiny_inputs();
  write_json_file(dir / "model.json", to_json(in.model));
  write_json_file(dir / "profile.json", to_json(in.profiles));
  write_json_file(dir / "cluster.json", to_json(in.cluster));
  write_json_file(dir / "job.json", to_json(in.job));
  EXPECT_EQ(to_json(load_model_spec(dir / "model.json")), to_json(in.model));
  EXPECT_EQ(to_json(load_profile_set(dir / "profile.json")), to_json(in.profiles));
  EXPECT_EQ(to_json(load_cluster_spec(dir / "cluster.json")), to_json(in.cluster));
  EXPECT_EQ(to_json(load_job_spec(dir / "job.json")), to_json(in.job));
}

TEST(SailorInputs, BadInputNamesFileAndField) {
  fleet::testing::TempDir dir;
  const PlannerInputs in = testing::tiny_inputs();
  nlohmann::json cluster = to_json(in.cluster);
  auto cluster_error = [&](const nlohmann::json& c) {
    write_json_file(dir / "cluster.json", c);
    return error_of([&] { load_cluster_spec(dir / "cluster.json"); });
  };
  nlohmann::json bad = cluster;
  bad["gpu_types"]["slow"]["price_per_hour"] = -1;
  EXPECT_NE(cluster_error(bad).find("cluster.json: /gpu_types/slow/price_per_hour: price cannot be negative"),
            std::string::npos);
  bad = cluster;
  bad["zones"]["z1a"]["quotas"]["fast"] = 0;
  EXPECT_NE(cluster_error(bad).find("/zones/z1a/quotas/fast: quota must be positive"), std::string::npos);
  bad = cluster;
  bad["zones"]["z1a"]["quotas"]["tpu"] = 4;
  EXPECT_NE(cluster_error(bad).find("unknown GPU type 'tpu'"), std::string::npos);
  bad = cluster;
  bad["egress_usd_per_gb"]["cross_zone"] = -0.5;
  EXPECT_NE(cluster_error(bad).find("/egress_usd_per_gb/cross_zone: price cannot be negative"), std::string::npos);
  nlohmann::json job = to_json(in.job);
  job["runtime"] = "megatron";
  write_json_file(dir / "job.json", job);
  EXPECT_NE(error_of([&] { load_job_spec(dir / "job.json"); }).find("/runtime: must be 'sailor-run' or 'deepspeed'"),
            std::string::npos);
  // Power: both figures or neither, idle at most busy; known GPU types get the built-in figures.
  bad = cluster;
  bad["gpu_types"]["slow"]["busy_watts"] = 300;
  EXPECT_NE(cluster_error(bad).find("/gpu_types/slow: give both idle_watts and busy_watts, or neither"),
            std::string::npos);
  bad["gpu_types"]["slow"]["idle_watts"] = 400;
  EXPECT_NE(cluster_error(bad).find("/gpu_types/slow/idle_watts"), std::string::npos);
  bad["gpu_types"]["slow"]["idle_watts"] = 30;
  write_json_file(dir / "cluster.json", bad);
  EXPECT_EQ(load_cluster_spec(dir / "cluster.json").gpu_types.at("slow").power.busy_watts, 300);
  EXPECT_FALSE(load_cluster_spec(dir / "cluster.json").gpu_types.at("fast").power.known());
  nlohmann::json named = cluster;
  named["gpu_types"]["H100"] = named["gpu_types"]["fast"];
  write_json_file(dir / "cluster.json", named);
  EXPECT_EQ(load_cluster_spec(dir / "cluster.json").gpu_types.at("H100").power.busy_watts, 700);
  write_file_atomically(dir / "cluster.json", "{\"format\": ");
  EXPECT_NE(error_of([&] { load_cluster_spec(dir / "cluster.json"); }).find("malformed JSON"), std::string::npos);

  // Plans that ask for what the inputs do not have.
  auto plan_error = [&](Plan plan) {
    return error_of([&] {
      validate_plan(plan, in.model, in.cluster);
      pack_nodes(plan, in.cluster);
      estimate_plan(plan, in);
    });
  };
  using testing::make_plan;
  EXPECT_NE(plan_error(make_plan(2, 16, {2, 2}, {{{"tpu", "z1a"}}, {{"fast", "z1a"}}})).find("unknown GPU type 'tpu'"),
            std::string::npos);
  EXPECT_NE(
      plan_error(make_plan(2, 16, {2, 2}, {{{"fast", "mars-1"}}, {{"fast", "z1a"}}})).find("unknown zone 'mars-1'"),
      std::string::npos);
  EXPECT_NE(
      plan_error(make_plan(3, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z1a"}}})).find("lacks micro-batch size 3"),
      std::string::npos);
  EXPECT_NE(plan_error(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z1a"}}}, 4))
                .find("lacks micro-batch size 2 with TP 4"),
            std::string::npos);
  EXPECT_NE(plan_error(make_plan(2, 16, {2, 1}, {{{"fast", "z1a"}}, {{"fast", "z1a"}}})).find("but the model has 4"),
            std::string::npos);
  EXPECT_NE(plan_error(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z1a"}}}, 3))
                .find("TP degree must be 1, 2, 4 or 8"),
            std::string::npos);
  Plan greedy = make_plan(2, 16, {4}, {std::vector<std::pair<std::string, std::string>>(17, {"fast", "z1a"})});
  EXPECT_NE(plan_error(greedy).find("uses 17 fast in z1a but the quota is 16"), std::string::npos);
  PlannerInputs short_profile = in;
  short_profile.profiles.gpus["fast"][{2, 1}].resize(3);
  EXPECT_NE(error_of([&] {
              Plan p = make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z1a"}}});
              pack_nodes(p, short_profile.cluster);
              estimate_plan(p, short_profile);
            }).find("lacks layer 3"),
            std::string::npos);
}

}  // namespace
}  // namespace fleet::sailor

namespace fleet::sailor {
namespace {

TEST(ProfileCompletion, ShortProfilesTakeTheirLastMeasuredBlockAndSaySo) {
  // A GH-96 profile of GPT-Neo-2.7 (34 layers) measured up to block 24 (26
  // entries, the head last): the missing blocks take block 24's figures and
  // the note warns that it may be another model's profile (SAILOR's planner
  // data shipped OPT-350's 26-layer GH-96 profile under GPT-Neo-2.7's name).
  ImportOptions opt;
  opt.source = kReference;
  opt.model = "GPT-Neo-2.7";
  opt.extra_quotas["GH-96"]["us-central1-a"] = 8;
  ImportedInputs imported = import_sailor(opt);
  const std::vector<LayerTimes> full = imported.profiles.gpus.at("GH-96").at({8, 4});
  ASSERT_EQ(full.size(), 34u);
  for (auto& [key, times] : imported.profiles.gpus.at("GH-96")) {
    const LayerTimes head = times.back();
    times.resize(25);
    times.push_back(head);
  }
  const std::vector<std::string> notes = complete_profiles(imported.profiles, imported.model);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("layers 25-32 not measured"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("may be another model's"), std::string::npos) << notes[0];
  const auto& times = imported.profiles.gpus.at("GH-96").at({8, 4});
  ASSERT_EQ(times.size(), 34u);
  for (int b = 25; b <= 32; ++b) EXPECT_EQ(times[static_cast<std::size_t>(b)], times[24]) << b;
  EXPECT_EQ(times[33], full[33]);  // the head stays the head
  EXPECT_EQ(times[24], full[24]);

  // And a GH-96 plan of the whole model can be simulated.
  PlannerInputs in{imported.model, imported.profiles, imported.cluster, imported.job};
  fleet::testing::TempDir dir;
  write_file_atomically(dir / "plan.json",
                        R"({"format": "gpufleet-sailor-plan", "version": 1, "mbs": 8, "global_batch": 64, "stages": [
                              {"layers": [0, 17], "tp": 4, "replicas": [{"gpu": "GH-96", "zone": "us-central1-a"}]},
                              {"layers": [17, 34], "tp": 4, "replicas": [{"gpu": "GH-96", "zone": "us-central1-a"}]}]})");
  in.job.global_batch = 64;
  const Estimate e = estimate_file(dir / "plan.json", in);
  EXPECT_GT(e.iteration_s, 0.0);
  EXPECT_TRUE(std::isfinite(e.iteration_s));
}

TEST(SailorLayout, AValidationPlansGlobalBatchIsItsGbs) {
  // SAILOR's validation plans name their global batch; its planner's plans leave it to the job.
  const PlannerInputs in = example_inputs("gpt-neo-2.7");
  const std::string layout = R"({"mbs": 1, "gbs": 64, "pipeline_list": [{"num_stages": 1,
      "layers_per_stage": [[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33]],
      "tmp_per_stage": [[[[["A100-40", 4, "us-central1-a"]], 4]]], "dp": [1]}]})";
  EXPECT_EQ(plan_from_json(parse_json(layout, "plan").root(), in.job).global_batch, 64);
  nlohmann::json without = nlohmann::json::parse(layout);
  without.erase("gbs");
  EXPECT_EQ(plan_from_json(parse_json(without.dump(), "plan").root(), in.job).global_batch, in.job.global_batch);
}

TEST(ProfileCompletion, ProfilesThatCannotBeCompletedAreRefused) {
  ModelSpec model;
  model.name = "m";
  model.layers.resize(5);  // embedding, three identical blocks, head
  for (auto& l : model.layers) l.params = {{1, 100.0}};
  model.layers[0].params = {{1, 7.0}};
  const LayerTimes t{1, 2, 3};
  auto refused = [&](std::vector<LayerTimes> times) {
    ProfileSet p;
    p.gpus["g"][{1, 1}] = std::move(times);
    return error_of([&] { complete_profiles(p, model); });
  };
  EXPECT_NE(refused({t, t}).find("at least the embedding, one block and the head"), std::string::npos);
  EXPECT_NE(refused({t, t, t, t, t, t}).find("has 6 layers"), std::string::npos);
  model.layers[3].params = {{1, 200.0}};
  EXPECT_NE(refused({t, t, t, t}).find("block 3 differs in size"), std::string::npos);

  model.layers[3].params = {{1, 100.0}};
  ProfileSet ok;
  ok.gpus["g"][{1, 1}] = {t, LayerTimes{4, 5, 6}, LayerTimes{7, 8, 9}};
  const auto notes = complete_profiles(ok, model);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("layers 2-3 not measured"), std::string::npos) << notes[0];
  const auto& filled = ok.gpus["g"][{1, 1}];
  ASSERT_EQ(filled.size(), 5u);
  EXPECT_EQ(filled[2], (LayerTimes{4, 5, 6}));
  EXPECT_EQ(filled[4], (LayerTimes{7, 8, 9}));
}

TEST(ProfileCompletion, SmallerMicroBatchesAreNeverSlower) {
  ProfileSet p;
  p.gpus["g"][{1, 1}] = {LayerTimes{5, 1, 3}};
  p.gpus["g"][{2, 1}] = {LayerTimes{2, 9, 1}};
  p.gpus["g"][{4, 1}] = {LayerTimes{3, 8, 2}};
  p.gpus["g"][{1, 2}] = {LayerTimes{1, 1, 1}};
  const auto note = monotone_in_batch_size(p);
  ASSERT_TRUE(note.has_value());
  EXPECT_NE(note->find("2 of 4"), std::string::npos) << *note;
  auto times = [&](int mbs, int tp) { return p.gpus["g"][std::make_pair(mbs, tp)][0]; };
  EXPECT_EQ(times(2, 1), (LayerTimes{2, 8, 1}));
  EXPECT_EQ(times(1, 1), (LayerTimes{2, 1, 1}));  // the least over every larger batch
  EXPECT_EQ(times(4, 1), (LayerTimes{3, 8, 2}));
  EXPECT_FALSE(monotone_in_batch_size(p).has_value());
}

}  // namespace
}  // namespace fleet::sailor

namespace fleet::sailor {
namespace {

TEST(PlanChecks, NodeIndicesMustLieInsideTheQuota) {
  const PlannerInputs in = example_inputs("opt-350");
  Plan plan = load_plan(kExamples / "plans" / "opt350_gh200_pp2.json", in.job);
  validate_plan(plan, in.model, in.cluster);
  plan.stages[0].replicas[0].node = 999;
  EXPECT_NE(error_of([&] { validate_plan(plan, in.model, in.cluster); }).find("node 999"), std::string::npos);
  plan.stages[0].replicas[0].node = -4;
  EXPECT_NE(error_of([&] { validate_plan(plan, in.model, in.cluster); }).find("negative"), std::string::npos);
  // Two TP-4 replicas on one node of 4 GPUs.
  plan.stages[0].replicas[0].node = 0;
  plan.stages[1].replicas[0].node = 0;
  EXPECT_NE(error_of([&] { validate_plan(plan, in.model, in.cluster); }).find("more than its 4 GPUs"),
            std::string::npos);
}

TEST(PlanChecks, SailorLayoutCountsMustAgreeWithItsStages) {
  const PlannerInputs in = example_inputs("opt-350");
  const Plan plan = load_plan(kExamples / "plans" / "opt350_gh200_pp2.json", in.job);
  nlohmann::json sailor = plan_to_sailor_json(plan, in.cluster);
  fleet::testing::TempDir dir;
  auto load_with = [&](const char* key, nlohmann::json value) {
    nlohmann::json changed = sailor;
    changed["pipeline_list"][0][key] = std::move(value);
    write_file_atomically(dir / "p.json", changed.dump());
    return error_of([&] { load_plan(dir / "p.json", in.job); });
  };
  EXPECT_NE(load_with("num_stages", 3).find("num_stages is 3 but layers_per_stage lists 2"), std::string::npos);
  EXPECT_NE(load_with("dp", {2, 1}).find("stage 0 has dp 2"), std::string::npos);
  EXPECT_NE(load_with("dp", {1}).find("dp lists 1 stages"), std::string::npos);
  EXPECT_EQ(load_with("dp", 1), "no error");
}

}  // namespace
}  // namespace fleet::sailor
