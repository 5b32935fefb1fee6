#include "sailor/runtime/commands.h"

#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/commands.h"
#include "sailor/runtime/control_store.h"
#include "sailor/runtime/elastic.h"

namespace fleet::sailor::runtime {

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

namespace {

std::unique_ptr<ControlStore> connect_controller(const std::string& address) {
  const auto [host, port] = parse_host_port(address);
  return ControlStore::connect(host, port, std::chrono::seconds(10));
}

}  // namespace

int run_join(const JobAddress& c) {
  auto store = connect_controller(c.address);
  if (store->get(control_keys::kDone)) throw InputError("the job at " + c.address + " has finished");
  const auto total = store->add(control_keys::kJoinRequests, c.join_workers);
  std::cout << fmt::format(
      "asked the job at {} for {} more worker(s) ({} asked in all); they join at the next step "
      "boundary\n",
      c.address, c.join_workers, total);
  return 0;
}

int run_status(const JobAddress& c) {
  auto store = connect_controller(c.address);
  const auto text = store->get(control_keys::kStatus);
  if (!text) throw InputError("the store at " + c.address + " holds no elastic job");
  const auto status = nlohmann::json::parse(*text);
  if (c.json) {
    std::cout << status.dump(2) << "\n";
    return 0;
  }
  if (status.value("state", "") == "waiting") {
    std::cout << fmt::format("waiting for workers: {} of {} registered (generation 0 starts when all have)\n",
                             status.at("registered").get<std::int64_t>(), status.at("workers").get<int>());
    return 0;
  }
  std::string stages;
  for (const auto& st : status.at("plan").at("stages"))
    stages += fmt::format("{}[{},{}) x{}", stages.empty() ? "" : " ", st.at("layers")[0].get<int>(),
                          st.at("layers")[1].get<int>(), st.at("replicas").size());
  std::cout << fmt::format(
      "generation {} ({}): {} training worker(s) {}, other worker(s) {}\nplan: {}\n"
      "last change: {}\nsteps finished: {}\n",
      status.at("generation").get<int>(), status.at("state").get<std::string>(), status.at("training").size(),
      status.at("training").dump(), status.at("others").dump(), stages, status.at("cause").get<std::string>(),
      status.at("last_step").get<std::int64_t>());
  return 0;
}

}  // namespace fleet::sailor::runtime
