// dz-compress: compress a fine-tuned model as a sparse, low-bit delta from its base model, and reconstruct it.
#include "common/cli.h"
#include "devices/device_info.h"
#include "fleet/config.h"
#if FLEET_WITH_TORCH
#include "model/commands.h"
#endif

int main(int argc, char** argv) {
  fleet::Tool tool("dz-compress",
                   "Compress a fine-tuned model as a sparse, low-bit delta from its base model, and reconstruct it; "
                   "measure models (perplexity, task accuracy).");
  tool.set_version_details(fleet::devices::version_details);
#if FLEET_WITH_TORCH
  fleet::model::EvalCommand eval;
  std::vector<std::string> text;
  CLI::App* eval_cmd = tool.add_command("eval", "Perplexity on text and exact-match accuracy on synthetic tasks", [&] {
    for (const auto& t : text) eval.text.emplace_back(t);
    return fleet::model::run_eval(eval);
  });
  eval_cmd->add_option("--model", eval.model, "Model folder (Hugging Face layout)")->required();
  eval_cmd->add_option("--text", text, "Text file(s) to score");
  eval_cmd->add_option("--task", eval.tasks, "Synthetic task(s) to measure: copy, reverse, sort, add");
  eval_cmd->add_option("--samples", eval.samples, "Examples per task")->capture_default_str();
  eval_cmd->add_option("--seed", eval.seed, "Seed of the task examples")->capture_default_str();
  eval_cmd->add_option("--window", eval.window, "Tokens per scoring window")->capture_default_str();
  eval_cmd->add_option("--dtype", eval.dtype, "Compute dtype: float32 or bfloat16")->capture_default_str();
  eval_cmd->add_option("--threads", eval.threads, "CPU threads (0: libtorch's default)");
  fleet::add_json_flag(eval_cmd, &eval.json);
#endif
  return tool.run(argc, argv);
}
