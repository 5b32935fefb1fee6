// sailor-run: initialise and train models in one process (distributed training with a plan is not here yet).
#include "common/cli.h"
#include "devices/device_info.h"
#include "fleet/config.h"
#if FLEET_WITH_TORCH
#include "model/commands.h"
#endif

int main(int argc, char** argv) {
  fleet::Tool tool("sailor-run", "Train models: initialise a model folder, make synthetic corpora, train with "
                                 "AdamW and resumable checkpoints.");
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

  m::TrainCommand train;
  auto& job = train.job;
  auto& o = job.options;
  std::vector<std::string> data;
  CLI::App* train_cmd = tool.add_command("train", "Train a model on text files (one process, world size 1)", [&] {
    for (const auto& d : data) job.data.emplace_back(d);
    return m::run_train(train);
  });
  train_cmd->add_option("--model", job.model, "Model folder to start from");
  train_cmd->add_option("--data", data, "Training text files (repeatable)");
  train_cmd->add_option("-o,--output", job.output, "Checkpoint folder (model + optimizer + step), rewritten atomically")
      ->required();
  train_cmd->add_flag("--resume", job.resume, "Continue the run checkpointed in --output (its options and data)");
  train_cmd->add_flag("--force", job.force, "Replace a non-empty output folder (a finished run included)");
  train_cmd->add_option("--steps", o.steps, "Optimizer steps of the whole run")->capture_default_str()
      ->check(fleet::in_range(1, 1e9));
  train_cmd->add_option("--batch-size", o.batch_size, "Sequences per micro-batch")->capture_default_str()
      ->check(fleet::in_range(1, 65536));
  train_cmd->add_option("--seq-len", o.seq_len, "Tokens per sequence")->capture_default_str()
      ->check(fleet::in_range(2, 1e6));
  train_cmd->add_option("--grad-accumulation", o.grad_accumulation, "Micro-batches per step")->capture_default_str()
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
