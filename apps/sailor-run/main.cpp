// sailor-run: initialise models and train them, in one process or as the ranks of a
// data/pipeline-parallel job (a sailor-plan plan), launched here, by torchrun or by srun.
#include "common/cli.h"
#include "devices/device_info.h"
#include "fleet/config.h"
#if FLEET_WITH_TORCH
#include "model/commands.h"
#include "sailor/runtime/commands.h"
#endif
#include "sailor/runtime/launcher.h"

int main(int argc, char** argv) {
  fleet::Tool tool("sailor-run", "Train models: initialise a model folder, make synthetic corpora, train with "
                                 "AdamW and resumable checkpoints, on one process or with a plan's data and "
                                 "pipeline parallelism over several.");
  tool.set_version_details(fleet::devices::version_details);
#if FLEET_WITH_TORCH
  namespace m = fleet::model;
  m::InitCommand init;
  CLI::App* init_cmd = tool.add_command("init", "Write a randomly initialised model folder (Hugging Face layout)",
                                        [&] { return m::run_init(init); });
  init_cmd->add_option("--preset", init.preset, "Built-in config: tiny (0.8 M parameters), small (10 M), 100m (101 M)");
  init_cmd->add_option("--config", init.config, "A config.json of LlamaForCausalLM instead of a preset");
  init_cmd->add_option("--tokenizer", init.tokenizer, "tokenizer.json to use (default: the 260-token byte tokenizer)");
  init_cmd->add_option("-o,--output", init.output, "Model folder to write")->required();
  init_cmd->add_option("--seed", init.seed, "Seed of the initial weights")->capture_default_str()
      ->check(fleet::in_range(0, 9.2e18));
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
      ->required();
  train_cmd->add_flag("--resume", job.resume, "Continue the run checkpointed in --output (its options and data)");
  train_cmd->add_flag("--force", job.force, "Replace a non-empty output folder (a finished run included)");
  train_cmd->add_option("--steps", o.steps, "Optimizer steps of the whole run")->capture_default_str()
      ->check(fleet::in_range(1, 1e9));
  train_cmd->add_option("--plan", job.plan, "A sailor-plan plan (stages, replicas, mbs, global batch) to train with")
      ->check(CLI::ExistingFile);
  train_cmd->add_option("--metrics", job.metrics, "Append one JSON object per step to this file (rank 0)");
  train_cmd->add_option("--timeout", job.timeout_seconds, "Seconds to wait for the rendezvous and for a peer")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e6));
  train_cmd->add_option("--batch-size", o.batch_size, "Sequences per micro-batch (a plan's mbs replaces it)")->capture_default_str()
      ->check(fleet::in_range(1, 65536));
  train_cmd->add_option("--seq-len", o.seq_len, "Tokens per sequence")->capture_default_str()
      ->check(fleet::in_range(2, 1e6));
  train_cmd->add_option("--grad-accumulation", o.grad_accumulation,
                        "Micro-batches per step and replica (global batch = ranks x batch size x this)")->capture_default_str()
      ->check(fleet::in_range(1, 1e6));
  train_cmd->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str()
      ->check(fleet::in_range(1e-12, 10));
  train_cmd->add_option("--min-lr-ratio", o.min_lr_ratio, "Final learning rate as a fraction of --lr")->capture_default_str()
      ->check(fleet::in_range(0, 1));
  train_cmd->add_option("--warmup", o.warmup_steps, "Linear warm-up steps")->capture_default_str()
      ->check(fleet::in_range(0, 1e9));
  train_cmd->add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str()
      ->check(fleet::in_range(0, 10));
  train_cmd->add_option("--clip-norm", o.clip_norm, "Clip the gradient norm to this (0: off)")->capture_default_str()
      ->check(fleet::in_range(0, 1e9));
  train_cmd->add_option("--seed", o.seed, "Seed of the batch sampling")->capture_default_str()
      ->check(fleet::in_range(0, 9.2e18));
  train_cmd->add_option("--data-mode", o.data_mode,
                        "stream: random windows of the concatenated files; lines: one sequence per line")
      ->capture_default_str();
  train_cmd->add_option("--loss-after", o.loss_after, "Lines mode: train only on what follows this marker");
  train_cmd->add_option("--checkpoint-every", job.checkpoint_every, "Steps between checkpoints (0: at the end only)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e9));
  train_cmd->add_option("--stop-after", job.stop_after, "Stop after this many steps of this invocation (resume later)")
      ->check(fleet::in_range(0, 1e9));
  train_cmd->add_option("--log-every", job.log_every, "Steps between loss log lines")->capture_default_str()
      ->check(fleet::in_range(0, 1e9));
  train_cmd->add_option("--device", job.device, "cpu, cuda or auto (the GPU when libtorch sees one; bfloat16 autocast)")
      ->capture_default_str();
  fleet::add_threads_option(train_cmd, &train.threads);
  fleet::add_json_flag(train_cmd, &train.json);

  rt::LaunchCommand launch;
  CLI::App* launch_cmd = tool.add_command(
      "launch", "Start the workers of a job on this machine: sailor-run launch --nprocs N -- train ...",
      [&] { return rt::run_launch(launch); });
  launch_cmd->add_option("--nprocs", launch.nprocs, "Workers to start (default: as many as --plan needs)")
      ->check(fleet::in_range(1, 1024));
  launch_cmd->add_option("--plan", launch.plan, "Plan to hand to every worker as --plan")->check(CLI::ExistingFile);
  launch_cmd->add_option("--master-port", launch.master_port, "Rendezvous port on 127.0.0.1 (default: a free one)")
      ->check(fleet::in_range(1, 65535));
  launch_cmd->add_option("--grace", launch.grace_seconds, "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str()
      ->check(fleet::in_range(0, 3600));
  launch_cmd->add_option("worker", launch.arguments, "The workers' sailor-run command, after --")->required();

  m::CorpusCommand corpus;
  CLI::App* corpus_cmd = tool.add_command("make-corpus", "Write a synthetic training corpus (no downloads)",
                                          [&] { return m::run_make_corpus(corpus); });
  corpus_cmd->add_option("--task", corpus.task, "base (sentences), copy, reverse, sort or add")->required();
  corpus_cmd->add_option("--lines", corpus.lines, "Lines to write")->capture_default_str()
      ->check(fleet::in_range(1, 5e6));
  corpus_cmd->add_option("--seed", corpus.seed, "Seed")->capture_default_str()
      ->check(fleet::in_range(0, 9.2e18));
  corpus_cmd->add_option("-o,--output", corpus.output, "Text file to write")->required();
#endif
  return tool.run(argc, argv);
}
