#include "sailor/runtime/elastic.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "sailor/commands.h"
#include "sailor/search.h"

namespace fleet::sailor::runtime {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Appends one line with a single write: rank 0 appends step records to the
// same file, and O_APPEND keeps whole lines whole.
void append_line(const fs::path& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    spdlog::warn("cannot append to {}", path.string());
    return;
  }
  const std::string text = line + "\n";
  [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
}

// Step records that rank 0 appended to the metrics file since `offset`.
std::vector<std::int64_t> steps_since(const fs::path& metrics, std::uintmax_t& offset) {
  std::vector<std::int64_t> steps;
  std::ifstream in(metrics);
  if (!in) return steps;
  in.seekg(static_cast<std::streamoff>(offset));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line still being written
    offset += line.size() + 1;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && !j.contains("event")) {
      steps.push_back(j["step"].get<std::int64_t>());
    }
  }
  return steps;
}

std::int64_t checkpoint_step(const fs::path& output) {
  std::ifstream in(output / "trainer_state.json");
  if (!in) return -1;
  const auto j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.contains("step") && j["step"].is_number_integer() ? j["step"].get<std::int64_t>() : -1;
}

}  // namespace

PlannerInputs restrict_to_workers(const PlannerInputs& inputs, int workers) {
  PlannerInputs in = inputs;
  std::vector<std::pair<std::string, std::string>> pools;
  for (auto& [gpu, zones] : in.cluster.quotas) {
    for (auto& [zone, count] : zones) {
      if (count > 0) pools.emplace_back(gpu, zone);
    }
  }
  if (pools.size() != 1) {
    throw InputError(fmt::format("--elastic on one machine needs a cluster with one GPU pool (one type in one zone); "
                                 "this one has {}", pools.size()));
  }
  in.cluster.quotas[pools[0].first][pools[0].second] = workers;
  return in;
}

Plan plan_for_workers(const PlannerInputs& inputs, int workers) {
  SearchOptions options;
  options.max_gpus = workers;
  const std::vector<RankedPlan> plans = search_plans(restrict_to_workers(inputs, workers), options);
  return plans.front().plan;
}

std::optional<std::string> worker_option(const std::vector<std::string>& args, const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    for (const std::string& n : names) {
      if (args[i] == n && i + 1 < args.size()) return args[i + 1];
      if (args[i].rfind(n + "=", 0) == 0) return args[i].substr(n.size() + 1);
    }
  }
  return std::nullopt;
}

int run_elastic_launch(const LaunchCommand& c) {
  if (c.recovery != "restart") {
    throw UsageError("--recovery: only 'restart' so far (stop every worker, re-plan, resume from the checkpoint)");
  }
  if (c.arguments.empty() || c.arguments.front() != "train") throw UsageError("--elastic runs `train` workers");
  const auto output = worker_option(c.arguments, {"-o", "--output"});
  if (!output) throw UsageError("--elastic: the workers need -o DIR (where they checkpoint and resume from)");
  if (!worker_option(c.arguments, {"--checkpoint-every"})) {
    spdlog::warn("--elastic without --checkpoint-every: a lost worker sends the job back to its start");
  }
  const auto metrics = worker_option(c.arguments, {"--metrics"});
  InputPaths paths;
  paths.inputs = c.elastic_inputs;
  const PlannerInputs inputs = load_inputs(paths);

  int workers = c.nprocs;
  Plan plan;
  if (!c.plan.empty()) {
    plan = load_plan(c.plan, inputs.job);
    if (workers == 0) workers = plan.gpus();
    if (plan.gpus() > workers) throw UsageError(fmt::format("the plan needs {} workers, --nprocs is {}", plan.gpus(), workers));
  } else {
    if (workers < 1) throw UsageError("--elastic: give --nprocs (the workers available) or a --plan");
    plan = plan_for_workers(inputs, workers);
  }

  char state_template[] = "/tmp/sailor-elastic-XXXXXX";
  if (::mkdtemp(state_template) == nullptr) throw IoError("cannot create a folder in /tmp");
  const fs::path state_dir = state_template;
  struct RemoveAtExit {
    fs::path dir;
    ~RemoveAtExit() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove_at_exit{state_dir};

  std::uintmax_t metrics_offset = 0;
  std::int64_t last_step_seen = 0;
  nlohmann::json last_record;     // the reconfiguration that led to this generation
  Clock::time_point last_failure;  // when its worker was found lost
  for (int generation = 0;; ++generation) {
    const fs::path plan_file = state_dir / fmt::format("plan-{}.json", generation);
    write_file_atomically(plan_file, plan_to_json(plan).dump(2) + "\n");
    std::vector<std::string> args = c.arguments;
    args.push_back("--plan");
    args.push_back(plan_file.string());
    const bool resume = generation > 0 && checkpoint_step(*output) >= 0;
    if (resume && std::find(args.begin(), args.end(), "--resume") == args.end()) args.push_back("--resume");
    if (generation > 0 && !resume && std::find(args.begin(), args.end(), "--force") == args.end()) {
      args.push_back("--force");  // nothing was checkpointed: start again
    }
    const int port = c.master_port > 0 ? c.master_port + generation : free_local_port();
    spdlog::info("generation {}: {} worker(s) for a plan of {} stage(s) x {} replica(s), rendezvous at 127.0.0.1:{}",
                 generation, plan.gpus(), plan.stages.size(), plan.stages.empty() ? 0 : plan.stages[0].replicas.size(),
                 port);

    // The reconfiguration record waits for the first step of this generation.
    std::optional<nlohmann::json> pending_record;
    const Clock::time_point started = Clock::now();
    auto on_tick = [&] {
      if (!metrics) return;
      for (std::int64_t step : steps_since(*metrics, metrics_offset)) {
        if (pending_record) {
          (*pending_record)["restart_s"] = seconds_between(started, Clock::now());
          (*pending_record)["recovery_s"] = seconds_between(last_failure, Clock::now());
          (*pending_record)["first_step"] = step;
          append_line(*metrics, pending_record->dump());
          pending_record.reset();
        }
        last_step_seen = std::max(last_step_seen, step);
      }
    };
    if (generation > 0) pending_record = last_record;
    const WorkerOutcome outcome = run_workers(c, args, plan.gpus(), port, on_tick);
    on_tick();
    if (pending_record && metrics) append_line(*metrics, pending_record->dump());
    if (outcome.interrupted || (outcome.exit_code == 0 && !outcome.stopped_at_boundary)) return outcome.exit_code;

    // Workers were lost (a failure) or left (a preemption notice): the job continues on the others.
    const bool preempted = outcome.exit_code == 0;
    std::string cause = outcome.cause;
    int lost = 1;
    if (preempted) {
      lost = static_cast<int>(outcome.left_ranks.size());
      cause = fmt::format("worker(s) {} preempted (SIGTERM), left at a step boundary", fmt::join(outcome.left_ranks, ", "));
    }
    const Clock::time_point detected = preempted ? outcome.all_stopped_at : outcome.failed_at;
    const Plan old_plan = plan;
    const int survivors = workers - lost;
    last_failure = detected;
    nlohmann::json record = {{"event", "reconfiguration"},
                             {"generation", generation + 1},
                             {"recovery", c.recovery},
                             {"cause", cause},
                             {"workers_before", workers},
                             {"workers_after", survivors},
                             {"last_step_before", last_step_seen},
                             {"old_plan", plan_to_json(old_plan)},
                             {"stop_s", seconds_between(detected, outcome.all_stopped_at)}};
    workers = survivors;
    if (generation + 1 > c.max_reconfigurations) {
      spdlog::error("{} reconfigurations: giving up", generation + 1);
      return outcome.exit_code;
    }
    const Clock::time_point plan_start = Clock::now();
    try {
      if (workers < 1) throw NoSolutionError("no workers are left");
      plan = plan_for_workers(inputs, workers);
    } catch (const NoSolutionError& e) {
      record["plan_s"] = seconds_between(plan_start, Clock::now());
      record["result"] = std::string("no plan: ") + e.what();
      if (metrics) append_line(*metrics, record.dump());
      throw NoSolutionError(fmt::format("{}; {} worker(s) left admit no plan ({}); the last checkpoint (step {}) is in {}",
                                        cause, workers, e.what(), checkpoint_step(*output), *output));
    }
    record["plan_s"] = seconds_between(plan_start, Clock::now());
    record["new_plan"] = plan_to_json(plan);
    record["resumed_from_step"] = std::max<std::int64_t>(0, checkpoint_step(*output));
    record["steps_redone"] = std::max<std::int64_t>(0, last_step_seen - record["resumed_from_step"].get<std::int64_t>());
    spdlog::warn("{}: re-planned for {} worker(s) in {:.3f} s; restarting from the checkpoint of step {}",
                 cause, workers, record["plan_s"].get<double>(), record["resumed_from_step"].get<std::int64_t>());
    last_record = record;
  }
}

}  // namespace fleet::sailor::runtime
