// sailor-run: initialise models and train them, in one process or as the ranks of a
// data/pipeline-parallel job (a sailor-plan plan), launched here, by torchrun or by srun.
#include "cli/cli.h"
#include "devices/device_info.h"
#include "fleet/config.h"
#if FLEET_WITH_TORCH
#include "sailor-run/model_commands.h"
#include "sailor-run/launch_commands.h"
#include "sailor-run/train_commands.h"
#endif

int main(int argc, char** argv) {
  fleet::Tool tool("sailor-run",
                   "Train models: initialise a model folder, make synthetic corpora, train with AdamW "
                   "and resumable checkpoints, on one process or with a plan's parallelism over several.");
  tool.set_version_details(fleet::devices::version_details);
#if FLEET_WITH_TORCH
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
  fleet::add_number_option(init_cmd, "--seed", init.seed, "Seed of the initial weights", 0, 9.2e18);
  init_cmd->add_option("--dtype", init.dtype, "Stored dtype: float32, float16, bfloat16")->capture_default_str();
  init_cmd->add_flag("--force", init.force, "Replace a non-empty output folder");

  fleet::TrainCommands training;
  fleet::add_train_commands(tool, training);

  fleet::LaunchCommands launch;
  fleet::add_launch_commands(tool, launch);

  m::CorpusCommand corpus;
  CLI::App* corpus_cmd = tool.add_command("make-corpus", "Write a synthetic training corpus (no downloads)",
                                          [&] { return m::run_make_corpus(corpus); });
  corpus_cmd->add_option("--task", corpus.task, "base (sentences), copy, reverse, sort or add")->required();
  fleet::add_number_option(corpus_cmd, "--lines", corpus.lines, "Lines to write", 1, 5e6);
  fleet::add_number_option(corpus_cmd, "--seed", corpus.seed, "Seed", 0, 9.2e18);
  corpus_cmd->add_option("-o,--output", corpus.output, "Text file to write")
      ->transform(fleet::output_path())
      ->required();
#endif
  return tool.run(argc, argv);
}
