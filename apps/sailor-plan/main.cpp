// sailor-plan: plan distributed training on heterogeneous, multi-zone GPU pools.
#include "cli/cli.h"
#include "devices/device_info.h"
#include "sailor-plan/commands.h"

namespace {

// The four planner inputs, by folder or one by one.
void add_input_options(CLI::App* command, fleet::sailor::InputPaths& paths) {
  command->add_option("-i,--inputs", paths.inputs, "Folder with model.json, profile.json, cluster.json, job.json");
  command->add_option("--model", paths.model, "Model JSON (default: INPUTS/model.json)");
  command->add_option("--profile", paths.profile, "Profile JSON (default: INPUTS/profile.json)");
  command->add_option("--cluster", paths.cluster, "Cluster JSON (default: INPUTS/cluster.json)");
  command->add_option("--job", paths.job, "Job JSON (default: INPUTS/job.json)");
}

// What the subcommands fill from the command line; lives until the tool runs.
struct Commands {
  fleet::sailor::ImportCommand import;
  fleet::sailor::ImportHfCommand import_hf;
  fleet::sailor::SimulateCommand sim;
  std::string trace;
  fleet::sailor::CalibrateCommand calibrate;
  fleet::sailor::SearchCommand search;
  std::string search_output;
  fleet::sailor::ExportCommand exp;
};

void add_import_commands(fleet::Tool& tool, Commands& c) {
  CLI::App* imp = tool.add_command("import-sailor", "Convert the original SAILOR inputs into planner inputs",
                                   [&c] { return fleet::sailor::run_import(c.import); });
  imp->add_option("source", c.import.source, "SAILOR data folder (profiles/, providers/, configs/, llm_info.json)")
      ->required();
  imp->add_option("-m,--model-name", c.import.model, "Model to convert, e.g. OPT-350, GPT-Neo-2.7")->required();
  imp->add_option("-o,--output", c.import.output_dir, "Folder to write model/profile/cluster/job.json into")
      ->transform(fleet::output_path())
      ->required();
  imp->add_option("--price", c.import.prices,
                  "GPU=USD per GPU-hour (repeatable; defaults: A100-40 3.67, V100-16 2.80, GH-96 11.06)");
  imp->add_option("--quota", c.import.quotas, "GPU@ZONE=N extra GPUs available (repeatable)");
  imp->add_option("--global-batch", c.import.global_batch, "Global batch (default: the model's training config)")
      ->check(fleet::in_range(1, 1e7));
  imp->add_option("--seq-len", c.import.sequence_length, "Sequence length (default: the model's training config)")
      ->check(fleet::in_range(1, 1e7));

  CLI::App* hf = tool.add_command("import-hf", "Derive the planner's model.json from a Hugging Face config.json",
                                  [&c] { return fleet::sailor::run_import_hf(c.import_hf); });
  hf->add_option("config", c.import_hf.config,
                 "config.json (or a model folder holding it): Llama, Mistral, OPT, "
                 "GPT-NeoX or GPT-Neo")
      ->required();
  hf->add_option("-o,--output", c.import_hf.output, "model.json to write")->transform(fleet::output_path())->required();
  hf->add_option("--seq-len", c.import_hf.sequence_length, "Training sequence length")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e7));
  hf->add_option("--name", c.import_hf.name, "Model name (default: the config's folder name)");
}

void add_simulate_and_calibrate(fleet::Tool& tool, Commands& c) {
  CLI::App* simulate = tool.add_command("simulate", "Predict a plan's iteration time, memory per GPU and cost", [&c] {
    if (!c.trace.empty()) c.sim.trace = c.trace;
    return fleet::sailor::run_simulate(c.sim);
  });
  add_input_options(simulate, c.sim.paths);
  simulate->add_option("-p,--plan", c.sim.plan, "Plan JSON (ours, or SAILOR's pipeline_list layout)")->required();
  simulate->add_option("--trace", c.trace, "Write a Chrome/Perfetto timeline of one simulated iteration")
      ->transform(fleet::output_path());
  fleet::add_json_flag(simulate, &c.sim.json);

  CLI::App* calibrate_cmd =
      tool.add_command("calibrate", "Fit the simulator's constants to measured runs and report its leave-one-out error",
                       [&c] { return fleet::sailor::run_calibrate(c.calibrate); });
  add_input_options(calibrate_cmd, c.calibrate.paths);
  calibrate_cmd->add_option("--runs", c.calibrate.runs, "Measured runs JSON (docs/sailor-model.md)")->required();
  calibrate_cmd->add_option("--hold-out", c.calibrate.hold_out,
                            "Another model's inputs folder: its runs are predicted with the constants fitted here, "
                            "never fitted to");
  calibrate_cmd->add_option("--hold-out-runs", c.calibrate.hold_out_runs,
                            "The held-out model's measured runs (default: its folder's measured_runs.json)");
  fleet::add_json_flag(calibrate_cmd, &c.calibrate.json);
}

void add_search(fleet::Tool& tool, Commands& c) {
  CLI::App* search_cmd = tool.add_command("search", "Find the best plan for the cluster, job and objective", [&c] {
    if (!c.search_output.empty()) c.search.output = c.search_output;
    return fleet::sailor::run_search(c.search);
  });
  add_input_options(search_cmd, c.search.paths);
  search_cmd
      ->add_option("--objective", c.search.objective,
                   "throughput (iterations/s), cost ($/iteration) or energy (J/iteration)")
      ->capture_default_str();
  search_cmd->add_option("--max-cost-per-iter", c.search.max_cost_per_iter, "Upper bound on $ per iteration (0: none)")
      ->check(fleet::in_range(0, 1e12));
  search_cmd->add_option("--min-throughput", c.search.min_throughput, "Lower bound on iterations/s (0: none)")
      ->check(fleet::in_range(0, 1e9));
  search_cmd
      ->add_option("--max-energy-per-iter", c.search.max_energy_per_iter,
                   "Upper bound on joules per iteration, all GPUs together (0: none)")
      ->check(fleet::in_range(0, 1e15));
  search_cmd->add_option("--max-gpus", c.search.max_gpus, "Use at most this many GPUs (0: no limit)")
      ->check(fleet::in_range(0, 1e7));
  search_cmd->add_option("--top", c.search.top, "List the K best plans")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1000));
  search_cmd->add_option("--max-stages", c.search.max_stages, "Largest pipeline degree tried")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1024));
  search_cmd->add_flag("--exhaustive", c.search.exhaustive,
                       "Every stage-to-GPU-pool sequence, spill pool, TP degree per pool, layer split and DP degree "
                       "(small clusters only)");
  search_cmd->add_option("-o,--output", c.search_output, "Write the best plan (with predictions) to this file")
      ->transform(fleet::output_path());
  fleet::add_json_flag(search_cmd, &c.search.json);
}

void add_export(fleet::Tool& tool, Commands& c) {
  CLI::App* export_cmd = tool.add_command("export", "Write a plan in SAILOR's layout (or ours, with predictions)",
                                          [&c] { return fleet::sailor::run_export(c.exp); });
  add_input_options(export_cmd, c.exp.paths);
  export_cmd->add_option("-p,--plan", c.exp.plan, "Plan JSON")->required();
  export_cmd->add_option("--format", c.exp.format, "sailor or gpufleet")->capture_default_str();
  export_cmd->add_option("-o,--output", c.exp.output, "File to write")->transform(fleet::output_path())->required();
}

}  // namespace

int main(int argc, char** argv) {
  fleet::Tool tool("sailor-plan",
                   "Plan distributed training on heterogeneous, multi-zone GPU pools: predict a plan's time, memory "
                   "and cost, and search for the best one.");
  tool.set_version_details(fleet::devices::version_details);
  Commands commands;
  add_import_commands(tool, commands);
  add_simulate_and_calibrate(tool, commands);
  add_search(tool, commands);
  add_export(tool, commands);
  return tool.run(argc, argv);
}
