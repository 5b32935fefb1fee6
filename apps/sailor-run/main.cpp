// sailor-run: initialise models and train them, in one process or as the ranks of a
// data/pipeline-parallel job (a sailor-plan plan), launched here, by torchrun or by srun.
#include "cli/cli.h"
#include "devices/device_info.h"
#include "fleet/config.h"
#if FLEET_WITH_TORCH
#include "model/commands.h"
#include "sailor-run/launch_commands.h"
#include "sailor/runtime/commands.h"
#include "sailor/runtime/network_profile.h"
#include "sailor/runtime/profiler.h"
#endif

int main(int argc, char** argv) {
  fleet::Tool tool("sailor-run",
                   "Train models: initialise a model folder, make synthetic corpora, train with AdamW "
                   "and resumable checkpoints, on one process or with a plan's parallelism over several.");
  tool.set_version_details(fleet::devices::version_details);
#if FLEET_WITH_TORCH
  // A numeric option with its default shown and its range checked.
  auto number = [](CLI::App* cmd, const std::string& name, auto& value, const std::string& help, double min,
                   double max) {
    return cmd->add_option(name, value, help)->capture_default_str()->check(fleet::in_range(min, max));
  };
  namespace m = fleet::model;
  m::InitCommand init;
  CLI::App* init_cmd = tool.add_command("init", "Write a randomly initialised model folder (Hugging Face layout)",
                                        [&] { return m::run_init(init); });
  init_cmd->add_option("--preset", init.preset, "Built-in config: tiny (0.8 M parameters), small (10 M), 100m (101 M)");
  init_cmd->add_option("--config", init.config, "A config.json of LlamaForCausalLM instead of a preset");
  init_cmd->add_option("--tokenizer", init.tokenizer, "tokenizer.json to use (default: the 260-token byte tokenizer)");
  init_cmd->add_option("-o,--output", init.output, "Model folder to write")
      ->transform(fleet::output_path())
      ->required();
  number(init_cmd, "--seed", init.seed, "Seed of the initial weights", 0, 9.2e18);
  init_cmd->add_option("--dtype", init.dtype, "Stored dtype: float32, float16, bfloat16")->capture_default_str();
  init_cmd->add_flag("--force", init.force, "Replace a non-empty output folder");

  namespace rt = fleet::sailor::runtime;
  rt::TrainCommand train;
  auto& job = train.job;
  auto& o = job.options;
  std::vector<std::string> data;
  CLI::App* train_cmd = tool.add_command(
      "train", "Train a model on text files: one process, or one rank of a job (RANK/WORLD_SIZE or SLURM)", [&] {
        for (const auto& d : data) job.data.emplace_back(d);
        return rt::run_train(train);
      });
  train_cmd->add_option("--model", job.model, "Model folder to start from");
  train_cmd->add_option("--data", data, "Training text files (repeatable)");
  train_cmd->add_option("-o,--output", job.output, "Checkpoint folder (model + optimizer + step), rewritten atomically")
      ->transform(fleet::output_path())
      ->required();
  train_cmd->add_flag("--resume", job.resume, "Continue the run checkpointed in --output (its options and data)");
  train_cmd->add_flag("--force", job.force, "Replace a non-empty output folder (a finished run included)");
  number(train_cmd, "--steps", o.steps, "Optimizer steps of the whole run", 1, 1e9);
  train_cmd->add_option("--plan", job.plan, "A sailor-plan plan (stages, replicas, mbs, global batch) to train with")
      ->check(CLI::ExistingFile);
  train_cmd->add_option("--metrics", job.metrics, "Append one JSON object per step to this file (rank 0)")
      ->transform(fleet::output_path());
  train_cmd->add_option("--trace", job.trace, "Write a Perfetto trace of the last step, one row per rank")
      ->transform(fleet::output_path());
  number(train_cmd, "--timeout", job.timeout_seconds, "Seconds to wait for the rendezvous and for a peer", 1, 1e6);
  number(train_cmd, "--batch-size", o.batch_size, "Sequences per micro-batch (a plan's mbs replaces it)", 1, 65536);
  number(train_cmd, "--seq-len", o.seq_len, "Tokens per sequence", 2, 1e6);
  number(train_cmd, "--grad-accumulation", o.grad_accumulation,
         "Micro-batches per step and replica (global batch = ranks x batch size x this)", 1, 1e6);
  number(train_cmd, "--lr", o.lr, "Peak learning rate", 1e-12, 10);
  number(train_cmd, "--min-lr-ratio", o.min_lr_ratio, "Final learning rate as a fraction of --lr", 0, 1);
  number(train_cmd, "--warmup", o.warmup_steps, "Linear warm-up steps", 0, 1e9);
  number(train_cmd, "--adam-eps", o.eps, "AdamW epsilon", 1e-30, 1);
  number(train_cmd, "--weight-decay", o.weight_decay, "AdamW weight decay (matrices only)", 0, 10);
  number(train_cmd, "--clip-norm", o.clip_norm, "Clip the gradient norm to this (0: off)", 0, 1e9);
  number(train_cmd, "--seed", o.seed, "Seed of the batch sampling", 0, 9.2e18);
  train_cmd
      ->add_option("--data-mode", o.data_mode,
                   "stream: random windows of the concatenated files; lines: one sequence per line")
      ->capture_default_str();
  train_cmd->add_option("--loss-after", o.loss_after, "Lines mode: train only on what follows this marker");
  number(train_cmd, "--checkpoint-every", job.checkpoint_every, "Steps between checkpoints (0: at the end only)", 0,
         1e9);
  train_cmd->add_option("--stop-after", job.stop_after, "Stop after this many steps of this invocation (resume later)")
      ->check(fleet::in_range(0, 1e9));
  number(train_cmd, "--log-every", job.log_every, "Steps between loss log lines", 0, 1e9);
  train_cmd->add_option("--device", job.device, "cpu, cuda or auto (the GPU when libtorch sees one; bfloat16 autocast)")
      ->capture_default_str();
  fleet::add_threads_option(train_cmd, &train.threads);
  fleet::add_json_flag(train_cmd, &train.json);

  rt::ProfileCommand profile;
  CLI::App* profile_cmd = tool.add_command(
      "profile", "Measure per-layer forward/backward/update times and activation memory for sailor-plan",
      [&] { return rt::run_profile(profile); });
  profile_cmd->add_option("--model", profile.model, "Model folder to profile")->required();
  profile_cmd->add_option("--gpu-type", profile.gpu_type, "Name of this device in the cluster description")->required();
  profile_cmd->add_option("--mbs", profile.mbs, "Micro-batch sizes (comma-separated)")->delimiter(',');
  profile_cmd
      ->add_option("--tp", profile.tp,
                   "Tensor-parallel degrees (comma-separated); above 1, run under sailor-run launch --nprocs "
                   "(the largest degree)")
      ->delimiter(',')
      ->capture_default_str();
  profile_cmd->add_option("--seq-len", profile.seq_len, "Tokens per sequence (default: min(max positions, 1024))")
      ->check(fleet::in_range(2, 1e6));
  profile_cmd->add_option("--repeats", profile.repeats, "Timed runs per layer (median)")
      ->check(fleet::in_range(1, 1e3));
  profile_cmd->add_option("--warmup", profile.warmup, "Untimed runs per layer first")->check(fleet::in_range(0, 1e3));
  profile_cmd->add_option("--device", profile.device, "cpu, cuda or auto")->capture_default_str();
  number(profile_cmd, "--timeout", profile.timeout_seconds,
         "Under launch: seconds to wait for the rendezvous and peers", 1, 1e6);
  profile_cmd->add_option("-o,--output", profile.output, "profile.json to write")
      ->transform(fleet::output_path())
      ->required();
  profile_cmd->add_option("--model-out", profile.model_output, "model.json to write (default: beside -o)")
      ->transform(fleet::output_path());
  fleet::add_threads_option(profile_cmd, &profile.threads);
  fleet::add_json_flag(profile_cmd, &profile.json);

  rt::NetworkProfileCommand net;
  CLI::App* net_cmd =
      tool.add_command("profile-net", "On 2+ ranks: fit the point-to-point bandwidth curve and write a cluster.json",
                       [&] { return rt::run_network_profile(net); });
  net_cmd->add_option("--gpu-type", net.gpu_type, "Name of the devices in the cluster description")->required();
  net_cmd->add_option("--link-class", net.link_class, "same_node, same_zone, cross_zone or cross_region")
      ->capture_default_str();
  net_cmd->add_option("--min-bytes", net.min_bytes, "Smallest message")->check(fleet::in_range(1, 1e10));
  net_cmd->add_option("--max-bytes", net.max_bytes, "Largest message")->check(fleet::in_range(1, 1e10));
  number(net_cmd, "--repeats", net.repeats, "Round trips per size (median)", 1, 1000);
  net_cmd->add_option("--memory", net.memory_bytes, "Device memory in bytes for cluster.json (default: this RAM)")
      ->check(fleet::in_range(1, 1e15));
  net_cmd->add_option("--price", net.price_per_hour, "$ per device-hour for cluster.json")
      ->check(fleet::in_range(0, 1e6));
  net_cmd->add_option("--timeout", net.timeout_seconds, "Rendezvous timeout, seconds")->check(fleet::in_range(1, 1e6));
  net_cmd->add_option("-o,--output", net.output, "cluster.json to write (rank 0)")
      ->transform(fleet::output_path())
      ->required();
  fleet::add_json_flag(net_cmd, &net.json);

  fleet::LaunchCommands launch;
  fleet::add_launch_commands(tool, launch);

  m::CorpusCommand corpus;
  CLI::App* corpus_cmd = tool.add_command("make-corpus", "Write a synthetic training corpus (no downloads)",
                                          [&] { return m::run_make_corpus(corpus); });
  corpus_cmd->add_option("--task", corpus.task, "base (sentences), copy, reverse, sort or add")->required();
  number(corpus_cmd, "--lines", corpus.lines, "Lines to write", 1, 5e6);
  number(corpus_cmd, "--seed", corpus.seed, "Seed", 0, 9.2e18);
  corpus_cmd->add_option("-o,--output", corpus.output, "Text file to write")
      ->transform(fleet::output_path())
      ->required();
#endif
  return tool.run(argc, argv);
}
