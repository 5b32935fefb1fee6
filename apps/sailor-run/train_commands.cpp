#include "sailor-run/train_commands.h"

#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/torch/cpu_threads.h"
#include "sailor/runtime/torch/elastic.h"

namespace fleet {
namespace sailor::runtime {

int run_train(const TrainCommand& c) {
  model::set_cpu_threads(c.threads);
  if (!c.job.resume && c.job.model.empty()) throw UsageError("give --model (or --resume)");
  auto result = train(c.job);
  if (result.stop_code != 0) {
    if (result.rank == 0 && result.stop_code == kExitNoPlan)
      spdlog::warn("the workers left admit no plan; {}",
                   result.last_step >= 0
                       ? fmt::format("wrote the checkpoint of step {} to {}", result.last_step, c.job.output.string())
                       : "nothing held the whole state: the last checkpoint stays");
    else if (result.rank == 0 && result.stop_code == kExitTerminated)
      spdlog::warn("stopped by SIGTERM after step {}; checkpoint in {} (continue with --resume)", result.last_step,
                   c.job.output.string());
    else if (result.rank == 0)
      spdlog::warn("left at step {} for a reconfiguration; checkpoint in {}", result.last_step, c.job.output.string());
    return result.stop_code;
  }
  // Every rank knows the job's losses; rank 0 reports them.
  if (result.rank != 0) return 0;
  if (!c.json && result.last_step == result.first_step) {
    std::cout << fmt::format("nothing to train: the run in {} finished at step {}\n", c.job.output.string(),
                             result.last_step);
    return 0;
  }
  if (c.json) {
    nlohmann::json j = {{"first_step", result.first_step},
                        {"last_step", result.last_step},
                        {"first_loss", result.first_loss},
                        {"last_loss", result.last_loss},
                        {"tokens_per_second", result.tokens_per_second},
                        {"losses", result.losses},
                        {"world_size", result.world_size},
                        {"layout", result.layout}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format(
        "trained steps {}-{}: loss {:.4f} -> {:.4f}, {:.0f} tokens/s on {} rank(s) ({}); "
        "checkpoint in {}\n",
        result.first_step + 1, result.last_step, result.first_loss, result.last_loss, result.tokens_per_second,
        result.world_size, result.layout, c.job.output.string());
  }
  return 0;
}

int run_profile(const ProfileCommand& c, bool json) {
  const auto result = profile_layers(c);
  if (!result) return 0;  // another rank reports
  if (json) {
    std::cout << nlohmann::json({{"profile", result->profile.string()},
                                 {"model", result->model.string()},
                                 {"entries", nlohmann::json::parse(result->entries_json)}})
                     .dump(2)
              << "\n";
    return 0;
  }
  for (const ProfileTotals& t : result->totals) {
    // Kept bytes are counted by the CPU allocator only: on a GPU they are unknown, not zero.
    const std::string kept = t.kept_bytes
                                 ? fmt::format("{:.1f} MiB kept for backward per rank", *t.kept_bytes / (1 << 20))
                                 : std::string("activation memory not measured on a GPU");
    std::cout << fmt::format("TP {}, mbs {}: forward {:.4f} s, backward {:.4f} s, update {:.4f} s over {} layers; {}\n",
                             t.tp, t.mbs, t.forward_s, t.backward_s, t.update_s, result->layers, kept);
  }
  std::cout << fmt::format("wrote {} and {}\n", result->profile.string(), result->model.string());
  return 0;
}

int run_network_profile(const NetworkProfileCommand& c, bool json) {
  const auto result = profile_network(c);
  if (!result) return 0;  // rank 0 reports
  if (json) {
    std::cout << result->cluster_json << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "{} link: GB/s = {:.4g} x^2 + {:.4g} x + {:.4g} (x = log2 MB), at most {:.2f} GB/s; wrote {}\n", c.link_class,
      result->fit[0], result->fit[1], result->fit[2], result->max_bytes_per_s / 1e9, c.output.string());
  return 0;
}

}  // namespace sailor::runtime

namespace {

using namespace fleet::sailor::runtime;

// The optimizer and its schedule.
void add_optimizer_options(CLI::App* train_cmd, fleet::model::TrainOptions& o) {
  add_number_option(train_cmd, "--lr", o.lr, "Peak learning rate", 1e-12, 10);
  add_number_option(train_cmd, "--min-lr-ratio", o.min_lr_ratio, "Final learning rate as a fraction of --lr", 0, 1);
  add_number_option(train_cmd, "--warmup", o.warmup_steps, "Linear warm-up steps", 0, 1e9);
  add_number_option(train_cmd, "--adam-eps", o.eps, "AdamW epsilon", 1e-30, 1);
  add_number_option(train_cmd, "--weight-decay", o.weight_decay, "AdamW weight decay (matrices only)", 0, 10);
  add_number_option(train_cmd, "--clip-norm", o.clip_norm, "Clip the gradient norm to this (0: off)", 0, 1e9);
  add_number_option(train_cmd, "--seed", o.seed, "Seed of the batch sampling", 0, 9.2e18);
}

void add_train(Tool& tool, TrainCommands& c) {
  auto& train = c.train;
  auto& job = train.job;
  auto& o = job.options;
  auto& data = c.data;
  CLI::App* train_cmd = tool.add_command(
      "train", "Train a model on text files: one process, or one rank of a job (RANK/WORLD_SIZE or SLURM)", [&c] {
        for (const auto& d : c.data) c.train.job.data.emplace_back(d);
        return run_train(c.train);
      });
  train_cmd->add_option("--model", job.model, "Model folder to start from");
  train_cmd->add_option("--data", data, "Training text files (repeatable)");
  train_cmd->add_option("-o,--output", job.output, "Checkpoint folder (model + optimizer + step), rewritten atomically")
      ->transform(output_path())
      ->required();
  train_cmd->add_flag("--resume", job.resume, "Continue the run checkpointed in --output (its options and data)");
  train_cmd->add_flag("--force", job.force, "Replace a non-empty output folder (a finished run included)");
  add_number_option(train_cmd, "--steps", o.steps, "Optimizer steps of the whole run", 1, 1e9);
  train_cmd->add_option("--plan", job.plan, "A sailor-plan plan (stages, replicas, mbs, global batch) to train with")
      ->check(CLI::ExistingFile);
  train_cmd->add_option("--metrics", job.metrics, "Append one JSON object per step to this file (rank 0)")
      ->transform(output_path());
  train_cmd->add_option("--trace", job.trace, "Write a Perfetto trace of the last step, one row per rank")
      ->transform(output_path());
  add_number_option(train_cmd, "--timeout", job.timeout_seconds, "Seconds to wait for the rendezvous and for a peer", 1,
                    1e6);
  add_number_option(train_cmd, "--batch-size", o.batch_size, "Sequences per micro-batch (a plan's mbs replaces it)", 1,
                    65536);
  add_number_option(train_cmd, "--seq-len", o.seq_len, "Tokens per sequence", 2, 1e6);
  add_number_option(train_cmd, "--grad-accumulation", o.grad_accumulation,
                    "Micro-batches per step and replica (global batch = ranks x batch size x this)", 1, 1e6);
  add_optimizer_options(train_cmd, o);
  train_cmd
      ->add_option("--data-mode", o.data_mode,
                   "stream: random windows of the concatenated files; lines: one sequence per line")
      ->capture_default_str();
  train_cmd->add_option("--loss-after", o.loss_after, "Lines mode: train only on what follows this marker");
  add_number_option(train_cmd, "--checkpoint-every", job.checkpoint_every,
                    "Steps between checkpoints (0: at the end only)", 0, 1e9);
  train_cmd->add_option("--stop-after", job.stop_after, "Stop after this many steps of this invocation (resume later)")
      ->check(in_range(0, 1e9));
  add_number_option(train_cmd, "--log-every", job.log_every, "Steps between loss log lines", 0, 1e9);
  train_cmd->add_option("--device", job.device, "cpu, cuda or auto (the GPU when libtorch sees one; bfloat16 autocast)")
      ->capture_default_str();
  add_threads_option(train_cmd, &train.threads);
  add_json_flag(train_cmd, &train.json);
}

void add_profile(Tool& tool, TrainCommands& c) {
  auto& profile = c.profile;
  CLI::App* profile_cmd = tool.add_command(
      "profile", "Measure per-layer forward/backward/update times and activation memory for sailor-plan",
      [&c] { return run_profile(c.profile, c.profile_json); });
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
      ->check(in_range(2, 1e6));
  profile_cmd->add_option("--repeats", profile.repeats, "Timed runs per layer (median)")->check(in_range(1, 1e3));
  profile_cmd->add_option("--warmup", profile.warmup, "Untimed runs per layer first")->check(in_range(0, 1e3));
  profile_cmd->add_option("--device", profile.device, "cpu, cuda or auto")->capture_default_str();
  add_number_option(profile_cmd, "--timeout", profile.timeout_seconds,
                    "Under launch: seconds to wait for the rendezvous and peers", 1, 1e6);
  profile_cmd->add_option("-o,--output", profile.output, "profile.json to write")->transform(output_path())->required();
  profile_cmd->add_option("--model-out", profile.model_output, "model.json to write (default: beside -o)")
      ->transform(output_path());
  add_threads_option(profile_cmd, &profile.threads);
  add_json_flag(profile_cmd, &c.profile_json);
}

void add_profile_net(Tool& tool, TrainCommands& c) {
  auto& net = c.net;
  CLI::App* net_cmd =
      tool.add_command("profile-net", "On 2+ ranks: fit the point-to-point bandwidth curve and write a cluster.json",
                       [&c] { return run_network_profile(c.net, c.net_json); });
  net_cmd->add_option("--gpu-type", net.gpu_type, "Name of the devices in the cluster description")->required();
  net_cmd->add_option("--link-class", net.link_class, "same_node, same_zone, cross_zone or cross_region")
      ->capture_default_str();
  net_cmd->add_option("--min-bytes", net.min_bytes, "Smallest message")->check(in_range(1, 1e10));
  net_cmd->add_option("--max-bytes", net.max_bytes, "Largest message")->check(in_range(1, 1e10));
  add_number_option(net_cmd, "--repeats", net.repeats, "Round trips per size (median)", 1, 1000);
  net_cmd->add_option("--memory", net.memory_bytes, "Device memory in bytes for cluster.json (default: this RAM)")
      ->check(in_range(1, 1e15));
  net_cmd->add_option("--price", net.price_per_hour, "$ per device-hour for cluster.json")->check(in_range(0, 1e6));
  net_cmd->add_option("--timeout", net.timeout_seconds, "Rendezvous timeout, seconds")->check(in_range(1, 1e6));
  net_cmd->add_option("-o,--output", net.output, "cluster.json to write (rank 0)")
      ->transform(output_path())
      ->required();
  add_json_flag(net_cmd, &c.net_json);
}

}  // namespace

void add_train_commands(Tool& tool, TrainCommands& c) {
  add_train(tool, c);
  add_profile(tool, c);
  add_profile_net(tool, c);
}

}  // namespace fleet
