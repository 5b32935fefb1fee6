#include "sailor/runtime/commands.h"

#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/commands.h"

namespace fleet::sailor::runtime {

int run_train(const TrainCommand& c) {
  model::set_cpu_threads(c.threads);
  if (!c.job.resume && c.job.model.empty()) throw UsageError("give --model (or --resume)");
  auto result = train(c.job);
  if (result.stop_code != 0) {
    if (result.rank == 0) {
      spdlog::warn("left at step {} for a reconfiguration; checkpoint in {}", result.last_step, c.job.output.string());
    }
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
    nlohmann::json j = {{"first_step", result.first_step}, {"last_step", result.last_step},
                        {"first_loss", result.first_loss}, {"last_loss", result.last_loss},
                        {"tokens_per_second", result.tokens_per_second}, {"losses", result.losses},
                        {"world_size", result.world_size}, {"layout", result.layout}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("trained steps {}-{}: loss {:.4f} -> {:.4f}, {:.0f} tokens/s on {} rank(s) ({}); "
                             "checkpoint in {}\n",
                             result.first_step + 1, result.last_step, result.first_loss, result.last_loss,
                             result.tokens_per_second, result.world_size, result.layout, c.job.output.string());
  }
  return 0;
}

}  // namespace fleet::sailor::runtime
