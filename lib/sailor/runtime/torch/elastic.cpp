#include "sailor/runtime/torch/elastic.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/output_check.h"
#include "common/temporary_folder.h"
#include "sailor/planner_inputs.h"
#include "sailor/runtime/torch/control_store.h"
#include "sailor/runtime/trainer_state.h"
#include "sailor/search.h"

namespace fleet::sailor::runtime {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

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

// Step records that rank 0 appended to the metrics file since `offset`,
// with the generation each ran in (-1 when not recorded).
std::vector<std::pair<std::int64_t, int>> steps_since(const fs::path& metrics, std::uintmax_t& offset) {
  std::vector<std::pair<std::int64_t, int>> steps;
  std::ifstream in(metrics);
  if (!in) return steps;
  in.seekg(static_cast<std::streamoff>(offset));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line still being written
    offset += line.size() + 1;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && !j.contains("event"))
      steps.emplace_back(j["step"].get<std::int64_t>(), j.value("generation", -1));
  }
  return steps;
}

// The last checkpoint's step, or -1; a state the controller cannot read
// (the workers report it themselves) counts as none.
std::int64_t checkpoint_step(const fs::path& output) {
  try {
    return trainer_state_step(output);
  } catch (const Error&) {
    return -1;
  }
}

}  // namespace

namespace {

int run_restart(const LaunchCommand& c);
int run_inplace(const LaunchCommand& c);
std::string this_host();

}  // namespace

int run_elastic_launch(const LaunchCommand& c) {
  if (c.recovery != "restart" && c.recovery != "inplace")
    throw UsageError(
        "--recovery: 'inplace' (survivors keep their state and hand it over) or 'restart' (every "
        "worker restarts from the last checkpoint)");
  if (c.external_workers) {
    if (c.recovery != "inplace") throw UsageError("a controller of workers started elsewhere recovers in place");
    return run_inplace(c);
  }
  if (c.arguments.empty() || c.arguments.front() != "train") throw UsageError("--elastic runs `train` workers");
  return c.recovery == "inplace" ? run_inplace(c) : run_restart(c);
}

namespace {

// What every elastic job starts from: the workers' output folder, their
// metrics file, the planner's inputs and the first plan.
struct ElasticStart {
  fs::path output;
  std::optional<fs::path> metrics;
  PlannerInputs inputs;
  SearchOptions search;  ///< the job's objective and bounds
  Plan plan;
  int workers = 0;
};

// A worker that exits 2 met bad input (a plan that does not fit the model,
// data that is not text): the job ends with that, it is not re-planned.
[[noreturn]] void throw_bad_input(const std::string& cause) {
  throw UsageError(cause + " (bad input, its error is above): the job stops, as every plan would meet it again");
}

ElasticStart elastic_start(const LaunchCommand& c) {
  ElasticStart e;
  if (c.external_workers) {
    e.output = c.output;
    if (!c.metrics.empty()) e.metrics = c.metrics;
  } else {
    const auto output = worker_option(c.arguments, {"-o", "--output"});
    if (!output) throw UsageError("--elastic: the workers need -o DIR (where they checkpoint and resume from)");
    e.output = *output;
    if (!worker_option(c.arguments, {"--checkpoint-every"}))
      spdlog::warn("--elastic without --checkpoint-every: a lost worker sends the job back to its start");
    if (auto m = worker_option(c.arguments, {"--metrics"})) e.metrics = *m;
  }
  // The launcher (or controller) owns the workers' outputs for the whole
  // job: its workers come and go, a second job on the same folder is refused.
  OutputCheck outputs;
  outputs.folder(e.output, "-o");
  if (e.metrics) outputs.file(*e.metrics, "--metrics");
  outputs.check(Existing::kReplace);
  InputPaths paths;
  paths.inputs = c.elastic_inputs;
  e.inputs = load_inputs(paths);
  e.search = search_options(c.objective, c.max_cost_per_iter, c.min_throughput, 0, c.max_energy_per_iter);
  e.workers = c.nprocs;
  if (!c.plan.empty()) {
    e.plan = load_plan(c.plan, e.inputs.job);
    if (e.workers == 0) e.workers = e.plan.gpus();
    if (e.plan.gpus() > e.workers)
      throw UsageError(fmt::format("the plan needs {} workers, --nprocs is {}", e.plan.gpus(), e.workers));
  } else {
    if (e.workers < 1) throw UsageError("--elastic: give the workers available (--nprocs, --workers) or a --plan");
    e.plan = plan_for_workers(e.inputs, e.workers, e.search);
  }
  return e;
}

// The workers' command line for one generation of a restart job: the job's,
// with the generation's plan, and --resume once a checkpoint exists (--force
// while none does, so that a new start accepts the folder).
std::vector<std::string> restart_arguments(const LaunchCommand& c, const fs::path& plan_file, int generation,
                                           const std::string& output) {
  std::vector<std::string> args = c.arguments;
  args.push_back("--plan");
  args.push_back(plan_file.string());
  const bool resume = generation > 0 && checkpoint_step(output) >= 0;
  if (resume && std::find(args.begin(), args.end(), "--resume") == args.end()) args.push_back("--resume");
  if (generation > 0 && !resume && std::find(args.begin(), args.end(), "--force") == args.end())
    args.push_back("--force");  // nothing was checkpointed: start again
  return args;
}

// Why generation `generation` ended and what it left: the metrics'
// reconfiguration record before re-planning, and how many workers are left.
struct GenerationLoss {
  std::string cause;
  int survivors = 0;
  nlohmann::json record;
  Clock::time_point detected;
};

GenerationLoss describe_loss(const LaunchCommand& c, const WorkerOutcome& outcome, int generation, int workers,
                             const Plan& plan, std::int64_t last_step_seen) {
  // Workers were lost (a failure) or left (a preemption notice): the job continues on the others.
  const bool preempted = outcome.exit_code == 0;
  GenerationLoss loss;
  loss.cause = outcome.cause;
  int lost = 1;
  if (preempted) {
    lost = static_cast<int>(outcome.left_ranks.size());
    loss.cause =
        fmt::format("worker(s) {} preempted (SIGTERM), left at a step boundary", fmt::join(outcome.left_ranks, ", "));
  }
  loss.detected = preempted ? outcome.all_stopped_at : outcome.failed_at;
  loss.survivors = workers - lost;
  loss.record = {{"event", "reconfiguration"},
                 {"generation", generation + 1},
                 {"recovery", c.recovery},
                 {"cause", loss.cause},
                 {"workers_before", workers},
                 {"workers_after", loss.survivors},
                 {"last_step_before", last_step_seen},
                 {"old_plan", plan_to_json(plan)},
                 {"detection_s", preempted ? 0.0 : seconds_between(outcome.last_alive, loss.detected)},
                 {"stop_s", seconds_between(loss.detected, outcome.all_stopped_at)}};
  return loss;
}

// The plan for the workers left, recorded in `loss.record`; NoSolutionError
// (recorded in the metrics too) when they admit none.
Plan replan_after(GenerationLoss& loss, const ElasticStart& start, const std::optional<std::string>& metrics,
                  const std::string& output, std::int64_t last_step_seen) {
  nlohmann::json& record = loss.record;
  const Clock::time_point plan_start = Clock::now();
  Plan plan;
  try {
    if (loss.survivors < 1) throw NoSolutionError("no workers are left");
    plan = plan_for_workers(start.inputs, loss.survivors, start.search);
  } catch (const NoSolutionError& e) {
    record["plan_s"] = seconds_between(plan_start, Clock::now());
    record["result"] = std::string("no plan: ") + e.what();
    if (metrics) append_line(*metrics, record.dump());
    throw NoSolutionError(
        fmt::format("{}; {} worker(s) left admit no plan ({}); the last checkpoint (step {}) is in {}", loss.cause,
                    loss.survivors, e.what(), checkpoint_step(output), output));
  }
  record["plan_s"] = seconds_between(plan_start, Clock::now());
  record["new_plan"] = plan_to_json(plan);
  record["resumed_from_step"] = std::max<std::int64_t>(0, checkpoint_step(output));
  record["steps_redone"] = std::max<std::int64_t>(0, last_step_seen - record["resumed_from_step"].get<std::int64_t>());
  spdlog::warn("{}: re-planned for {} worker(s) in {:.3f} s; restarting from the checkpoint of step {}", loss.cause,
               loss.survivors, record["plan_s"].get<double>(), record["resumed_from_step"].get<std::int64_t>());
  return plan;
}

int run_restart(const LaunchCommand& c) {
  ElasticStart start = elastic_start(c);
  const std::string output = start.output.string();
  std::optional<std::string> metrics;
  if (start.metrics) metrics = start.metrics->string();
  int workers = start.workers;
  Plan plan = start.plan;

  // The plan files of the generations, removed with the folder.
  const TemporaryFolder state("sailor-elastic");
  std::uintmax_t metrics_offset = 0;
  std::int64_t last_step_seen = 0;
  nlohmann::json last_record;      // the reconfiguration that led to this generation
  Clock::time_point last_failure;  // when its worker was found lost
  for (int generation = 0;; ++generation) {
    const fs::path plan_file = state.path() / fmt::format("plan-{}.json", generation);
    write_file_atomically(plan_file, plan_to_json(plan).dump(2) + "\n");
    const auto args = restart_arguments(c, plan_file, generation, output);
    const int port = c.master_port > 0 ? c.master_port + generation : free_local_port();
    spdlog::info("generation {}: {} worker(s) for a plan of {} stage(s) x {} replica(s), rendezvous at 127.0.0.1:{}",
                 generation, plan.gpus(), plan.stages.size(), plan.stages.empty() ? 0 : plan.stages[0].replicas.size(),
                 port);

    // The reconfiguration record waits for the first step of this generation.
    std::optional<nlohmann::json> pending_record;
    if (generation > 0) pending_record = last_record;
    const Clock::time_point started = Clock::now();
    auto on_tick = [&] {
      if (!metrics) return;
      for (const auto& [step, generation_of_step] : steps_since(*metrics, metrics_offset)) {
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
    const WorkerOutcome outcome = run_workers(c, args, plan.gpus(), port, on_tick);
    on_tick();
    if (pending_record && metrics) append_line(*metrics, pending_record->dump());
    if (outcome.interrupted || (outcome.exit_code == 0 && !outcome.stopped_at_boundary)) return outcome.exit_code;
    // Bad input is not a lost worker: every plan would meet it again.
    if (outcome.exit_code == static_cast<int>(ExitCode::kUsage)) throw_bad_input(outcome.cause);

    GenerationLoss loss = describe_loss(c, outcome, generation, workers, plan, last_step_seen);
    last_failure = loss.detected;
    workers = loss.survivors;
    if (generation + 1 > c.max_reconfigurations) {
      spdlog::error("{} reconfigurations: giving up", generation + 1);
      return outcome.exit_code;
    }
    plan = replan_after(loss, start, metrics, output, last_step_seen);
    last_record = loss.record;
  }
}

// In-place recovery (docs/training-runtime.md, "In-place recovery"): this
// process serves the store, publishes one membership per generation and
// supervises the workers; survivors keep their process and state. Local
// workers are its children (an exit is seen at once); external ones (srun
// steps) register through the store and are watched by their heartbeats.
class InplaceController {
 public:
  explicit InplaceController(const LaunchCommand& c) : c_(c), start_(elastic_start(c)), processes_(c, "worker") {}

  int run() {
    const int port = c_.master_port > 0 ? c_.master_port : free_local_port();
    store_ = ControlStore::serve(port, std::chrono::seconds(60));
    const std::string host = c_.external_workers ? this_host() : "127.0.0.1";
    spdlog::info("elastic controller at {}:{} (sailor-run status --controller {}:{})", host, port, host, port);
    const StopSignals signals;
    if (c_.external_workers) {
      if (!wait_for_registrations(signals)) return 128 + signals.received();
    } else {
      for (int id = 0; id < start_.workers; ++id) order_.push_back(id);
    }
    next_id_ = start_.workers;
    publish(start_.plan, {}, "start");
    if (!c_.external_workers)
      for (int id = 0; id < start_.workers; ++id) start_worker(id, 0);
    for (;;) {
      if (c_.external_workers)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      else
        for (const auto& e : processes_.poll(20)) on_exit(e);
      if (signals.received() != 0) {
        spdlog::warn("signal {}: stopping the workers; the last checkpoint stays in {}", signals.received(),
                     start_.output.string());
        processes_.signal_all(SIGKILL);
        return 128 + signals.received();
      }
      watch_metrics();
      if (finished()) return finish();
      check_heartbeats();
      check_requests();
      if (!cause_.empty() && Clock::now() >= settle_until_) {
        if (const int code = reconfigure(); code != 0) return code;
      }
    }
  }

 private:
  using Env = std::vector<std::pair<std::string, std::string>>;

  // How long a worker may take from its start (or a job's launch) to its
  // first heartbeat or registration.
  double startup_allowance_seconds() const { return 10 * c_.heartbeat_timeout_seconds; }

  bool alive(int id) const {
    return !lost_.count(id) && (c_.external_workers ? beats_.count(id) > 0 : processes_.running(id));
  }

  // External workers: the first `workers` to register make generation 0.
  bool wait_for_registrations(const StopSignals& signals) {
    spdlog::info("waiting for {} worker(s) to register (SAILOR_CONTROL={}:{})", start_.workers, this_host(),
                 store_->port());
    const auto deadline = Clock::now() + std::chrono::duration<double>(startup_allowance_seconds());
    for (std::int64_t announced = -1;;) {
      const std::int64_t count = registered();
      if (count >= start_.workers) break;
      // `sailor-run status` says how many have registered until generation 0 starts.
      if (count != announced) {
        announced = count;
        store_->set(control_keys::kStatus,
                    nlohmann::json{{"state", "waiting"}, {"registered", count}, {"workers", start_.workers}}.dump());
      }
      if (signals.received() != 0) return false;
      if (Clock::now() > deadline)
        throw RuntimeFailure(fmt::format("{} of {} worker(s) registered within {:.0f} s", count, start_.workers,
                                         startup_allowance_seconds()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (int id = 0; id < start_.workers; ++id) {
      order_.push_back(id);
      beats_[id] = {-1, Clock::now()};
    }
    joined_ = start_.workers;
    return true;
  }

  std::int64_t registered() {
    const auto value = store_->get(control_keys::kRegistered);
    return value ? std::stoll(*value) : 0;
  }

  void start_worker(int id, int generation) {
    const std::vector<std::string>& args = c_.arguments;
    const int rank = std::max(0, members_.rank_of(id));
    Env env = worker_environment(rank, static_cast<int>(members_.training.size()), "127.0.0.1", store_->port());
    env.emplace_back(kEnvElastic, "1");
    env.emplace_back("SAILOR_CONTROL", fmt::format("127.0.0.1:{}", store_->port()));
    env.emplace_back("SAILOR_WORKER_ID", std::to_string(id));
    env.emplace_back("SAILOR_GENERATION", std::to_string(generation));
    processes_.start(id, args, env);
    beats_[id] = {-1, Clock::now()};
  }

  // Writes the plan, the membership and the status, then moves the generation on.
  void publish(const Plan& plan, const std::vector<int>& leaving, const std::string& cause, bool save_only = false) {
    const int generation = generation_ + (published_ ? 1 : 0);
    published_ = true;
    const int ranks = plan.gpus();
    Membership m;
    m.generation = generation;
    for (int id : order_) {
      if (std::find(leaving.begin(), leaving.end(), id) != leaving.end()) continue;
      if (static_cast<int>(m.training.size()) < ranks)
        m.training.push_back(id);
      else
        m.others.push_back(id);
    }
    for (int id : leaving) m.others.push_back(id);
    m.leaving = leaving;
    m.plan = plan_to_json(plan);
    m.save_only = save_only;
    store_->set(control_keys::generation_prefix(generation) + "members", m.to_json());
    store_->set(control_keys::kGeneration, std::to_string(generation));
    generation_ = generation;
    members_ = m;
    plan_ = plan;
    status_ = nlohmann::json::parse(m.to_json());
    status_["state"] = save_only ? "saving" : "running";
    status_["cause"] = cause;
    status_["reconfigurations"] = generation;
    update_status();
  }

  void update_status() {
    status_["last_step"] = last_step_seen_;
    store_->set(control_keys::kStatus, status_.dump());
  }

  void on_exit(const WorkerProcesses::Exit& e) {
    if (e.code == 0) return;  // finished (a training rank at the end, or a spare told the job is done)
    const bool leaving = std::find(members_.leaving.begin(), members_.leaving.end(), e.id) != members_.leaving.end();
    if (leaving && e.code == kExitPreempted) return;  // handed its state over and left
    if (e.code == static_cast<int>(ExitCode::kUsage)) {
      processes_.signal_all(SIGKILL);
      throw_bad_input(e.describe());
    }
    lost_.insert(e.id);
    if (const auto stopped = stopped_.find(e.id); stopped != stopped_.end())
      note(stopped->second.cause, stopped->second.last_beat);
    else
      note(e.describe());
  }

  // `last_alive`: the lost worker's last sign of life (its last heartbeat);
  // an exit is seen at once.
  void note(const std::string& cause, std::optional<Clock::time_point> last_alive = std::nullopt) {
    if (cause_.empty()) {
      detected_ = Clock::now();
      last_alive_ = last_alive.value_or(detected_);
      // A lost worker takes the others' collectives down with it: let them
      // report, and gather every loss of the same moment into one change.
      settle_until_ = detected_ + std::chrono::milliseconds(100);
      cause_ = cause;
    } else if (cause_.find(cause) == std::string::npos) {
      cause_ += "; " + cause;
    }
  }

  bool finished() {
    if (c_.external_workers) return cause_.empty() && store_->get(control_keys::kDone).has_value();
    if (members_.training.empty()) return false;
    for (int id : members_.training)
      if (processes_.running(id) || lost_.count(id)) return false;
    return cause_.empty();
  }

  int finish() {
    store_->set(control_keys::kDone, "1");
    status_["state"] = "done";
    update_status();
    flush_record();
    const auto deadline = Clock::now() + std::chrono::duration<double>(c_.grace_seconds + 5);
    while (processes_.active() > 0 && Clock::now() < deadline) processes_.poll(20);
    // Workers started elsewhere still finish their last writes through the
    // store: serve it until their heartbeats have stopped.
    while (c_.external_workers && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(750));  // longer than a heartbeat's period
      bool beating = false;
      for (auto& [id, beat] : beats_) {
        const auto value = store_->get(control_keys::heartbeat(id));
        const std::int64_t count = value ? std::stoll(*value) : -1;
        if (count != beat.first) beating = true;
        beat.first = count;
      }
      if (!beating) break;
    }
    processes_.signal_all(SIGKILL);
    return 0;
  }

  void check_heartbeats() {
    if (Clock::now() - last_heartbeat_check_ < std::chrono::milliseconds(250)) return;
    last_heartbeat_check_ = Clock::now();
    // A peer already reported a lost connection: three missed beats are enough.
    const bool suspect = store_->get(control_keys::generation_prefix(generation_) + "failures").has_value();
    const double timeout = suspect ? std::min(c_.heartbeat_timeout_seconds, 1.5) : c_.heartbeat_timeout_seconds;
    for (auto& [id, beat] : beats_) {
      if (!alive(id)) continue;
      const auto value = store_->get(control_keys::heartbeat(id));
      const std::int64_t count = value ? std::stoll(*value) : -1;
      // Before its first beat a worker is still starting (loading libtorch,
      // possibly from a network file system, connecting to the store): it
      // gets the start-up allowance registration has, not the beat timeout.
      const double allowed = count < 0 ? startup_allowance_seconds() : timeout;
      if (count != beat.first) {
        beat = {count, Clock::now()};
      } else if (Clock::now() - beat.second > std::chrono::duration<double>(allowed)) {
        const std::string cause =
            count < 0 ? fmt::format("worker {} sent no first heartbeat within {:.0f} s of its start", id, allowed)
                      : fmt::format("worker {} sent no heartbeat for {:.1f} s", id, allowed);
        if (c_.external_workers) {
          lost_.insert(id);  // it may be alive but unreachable: it is out of every later generation
          note(cause, beat.second);
        } else {
          stopped_[id] = {cause, beat.second};
          spdlog::error("{}; stopping it", cause);
          processes_.signal(id, SIGKILL);
        }
        beat.second = Clock::now();
      }
    }
  }

  // Requests from the workers (a boundary reached, a failed collective) and from `sailor-run join`.
  void check_requests() {
    const std::string prefix = control_keys::generation_prefix(generation_);
    if (c_.external_workers) {
      // Workers started later (a new srun step) registered themselves.
      for (const std::int64_t n = registered(); joined_ < n; ++joined_) {
        const int id = static_cast<int>(joined_);
        order_.push_back(id);
        beats_[id] = {-1, Clock::now()};
        joiners_.push_back(id);
      }
    } else if (const auto joins = store_->get(control_keys::kJoinRequests)) {
      const std::int64_t asked = std::stoll(*joins);
      for (; joined_ < asked; ++joined_) {
        const int id = next_id_++;
        order_.push_back(id);
        start_worker(id, generation_ + 1);
        joiners_.push_back(id);
      }
    }
    if (!joiners_.empty() && !stop_asked_) {
      // The training ranks stop at the next step boundary and hand over to a plan with the newcomers.
      store_->set(prefix + "stop", "1");
      stop_asked_ = true;
    }
    if (const auto boundary = store_->get(prefix + "boundary"); boundary && !boundary_seen_) {
      boundary_seen_ = true;
      const auto j = nlohmann::json::parse(*boundary);
      boundary_leaving_ = j.at("leaving").get<std::vector<int>>();
      std::string why;
      if (!boundary_leaving_.empty())
        why = fmt::format("worker(s) {} preempted (SIGTERM), left at the boundary of step {}",
                          fmt::join(boundary_leaving_, ", "), j.at("step").get<std::int64_t>());
      if (!joiners_.empty())
        why += fmt::format("{}worker(s) {} joined", why.empty() ? "" : "; ", fmt::join(joiners_, ", "));
      note(why.empty() ? "stopped at a step boundary" : why);
      settle_until_ = Clock::now();
    }
    if (cause_.empty()) {
      if (const auto failures = store_->get(prefix + "failures")) {
        // A worker lost a peer that has not exited (yet): give it a moment to show up as lost.
        if (failure_seen_ == Clock::time_point{}) failure_seen_ = Clock::now();
        if (Clock::now() - failure_seen_ > std::chrono::seconds(2))
          note(fmt::format("{} worker(s) lost a peer that is still running", *failures));
      }
    }
  }

  int reconfigure() {
    const Clock::time_point plan_start = Clock::now();
    std::vector<int> leaving;
    int available = 0;
    for (int id : order_) {
      if (!alive(id)) continue;
      if (std::find(boundary_leaving_.begin(), boundary_leaving_.end(), id) != boundary_leaving_.end()) {
        leaving.push_back(id);
        continue;
      }
      ++available;
    }
    flush_record();
    nlohmann::json record = {{"event", "reconfiguration"},
                             {"generation", generation_ + 1},
                             {"recovery", "inplace"},
                             {"cause", cause_},
                             {"workers_before", static_cast<int>(members_.training.size() + members_.others.size())},
                             {"workers_after", available},
                             {"last_step_before", last_step_seen_},
                             {"old_plan", plan_to_json(plan_)}};
    const std::string cause = cause_;
    if (generation_ + 1 > c_.max_reconfigurations) {
      spdlog::error("{} reconfigurations: giving up", generation_ + 1);
      processes_.signal_all(SIGKILL);
      return 1;
    }
    // The order of ranks: survivors as they were, then spares, then newcomers.
    std::vector<int> order;
    for (int id : members_.training)
      if (alive(id)) order.push_back(id);
    for (int id : members_.others)
      if (alive(id)) order.push_back(id);
    for (int id : joiners_)
      if (alive(id) && std::find(order.begin(), order.end(), id) == order.end()) order.push_back(id);
    order_ = order;
    // The loss was seen when its process exited or missed its heartbeats;
    // stop_s is the wait for other losses of the same moment.
    record["detection_s"] = seconds_between(last_alive_, detected_);
    record["stop_s"] = seconds_between(detected_, plan_start);
    Plan plan;
    try {
      if (available < 1) throw NoSolutionError("no workers are left");
      plan = plan_for_workers(start_.inputs, available, start_.search);
    } catch (const NoSolutionError& e) {
      record["plan_s"] = seconds_between(plan_start, Clock::now());
      record["result"] = std::string("no plan: ") + e.what();
      const std::string why = fmt::format("{}; {} worker(s) left admit no plan ({})", cause, available, e.what());
      const std::int64_t saved = available > 0 ? save_state(cause, leaving, available, record) : -1;
      if (start_.metrics) append_line(*start_.metrics, record.dump());
      store_->set(control_keys::kStopped, why);
      status_["state"] = "stopped";
      update_status();
      processes_.signal_all(SIGKILL);
      if (saved >= 0)
        throw NoSolutionError(fmt::format("{}; the workers left wrote the checkpoint of step {} to {}", why, saved,
                                          start_.output.string()));
      throw NoSolutionError(fmt::format("{}; the last checkpoint (step {}) is in {}", why,
                                        checkpoint_step(start_.output), start_.output.string()));
    }
    record["plan_s"] = seconds_between(plan_start, Clock::now());
    record["new_plan"] = plan_to_json(plan);
    spdlog::warn("{}: re-planned for {} worker(s) in {:.3f} s: generation {} hands the state over in place", cause,
                 available, record["plan_s"].get<double>(), generation_ + 1);
    publish(plan, leaving, cause);
    pending_record_ = record;
    regroup_started_ = Clock::now();
    record_detected_ = detected_;
    cause_.clear();
    joiners_.clear();
    boundary_leaving_.clear();
    boundary_seen_ = false;
    stop_asked_ = false;
    failure_seen_ = {};
    return 0;
  }

  // No plan for the workers left: before the job stops, they take the state
  // over in a pipeline that only has to hold it and write it as a
  // checkpoint, so the resumed job loses no step they had finished. Returns
  // that step, or -1 (nobody held some part, or a worker was lost meanwhile:
  // the last checkpoint stays).
  std::int64_t save_state(const std::string& cause, const std::vector<int>& leaving, int available,
                          nlohmann::json& record) {
    const Clock::time_point started = Clock::now();
    const int model_layers = static_cast<int>(start_.inputs.model.layers.size());
    spdlog::warn("{}: no plan for the {} worker(s) left; they write the state they hold as a checkpoint", cause,
                 available);
    publish(save_plan_for_workers(plan_, model_layers, available), leaving, cause + "; saving the state", true);
    cause_.clear();
    const std::string key = control_keys::generation_prefix(generation_) + "saved";
    // Workers heartbeat while they write: a lost one is noticed as in training.
    const auto deadline = started + std::chrono::duration<double>(std::max(60.0, 10 * c_.heartbeat_timeout_seconds));
    std::int64_t saved = -1;
    while (Clock::now() < deadline && cause_.empty()) {
      if (const auto value = store_->get(key)) {
        saved = std::stoll(*value);
        break;
      }
      if (c_.external_workers)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      else
        for (const auto& e : processes_.poll(20))
          if (e.code != kExitNoPlan) on_exit(e);
      check_heartbeats();
    }
    if (saved < 0)
      spdlog::error("the workers left could not write their state ({}); the last checkpoint stays",
                    !cause_.empty()            ? cause_
                    : Clock::now() >= deadline ? std::string("timed out")
                                               : "some part was held by nobody");
    record["save_s"] = seconds_between(started, Clock::now());
    record["saved_step"] = saved;
    // Spares leave; the writers exit once their files are in place.
    store_->set(control_keys::kDone, "1");
    const auto grace = Clock::now() + std::chrono::duration<double>(c_.grace_seconds);
    while (!c_.external_workers && processes_.active() > 0 && Clock::now() < grace) processes_.poll(20);
    return saved;
  }

  // The record of the last reconfiguration waits for the first step of its generation.
  void watch_metrics() {
    if (!start_.metrics) return;
    const std::int64_t seen_before = last_step_seen_;
    for (const auto& [step, generation] : steps_since(*start_.metrics, metrics_offset_)) {
      if (pending_record_ && generation == generation_) {
        auto& r = *pending_record_;
        r["resumed_from_step"] = step - 1;
        r["steps_redone"] = std::max<std::int64_t>(0, last_step_seen_ - (step - 1));
        r["first_step"] = step;
        r["regroup_s"] = seconds_between(regroup_started_, Clock::now());
        r["recovery_s"] = seconds_between(record_detected_, Clock::now());
        if (const auto ready = store_->get(control_keys::generation_prefix(generation_) + "ready")) {
          const auto j = nlohmann::json::parse(*ready);
          r["state_transfer_s"] = j.at("handover_s");
          r["state_from"] = j.at("from");
        }
        append_line(*start_.metrics, r.dump());
        pending_record_.reset();
      }
      last_step_seen_ = std::max(last_step_seen_, step);
    }
    if (last_step_seen_ != seen_before) update_status();
  }

  void flush_record() {
    if (pending_record_ && start_.metrics) append_line(*start_.metrics, pending_record_->dump());
    pending_record_.reset();
  }

  const LaunchCommand& c_;
  ElasticStart start_;
  WorkerProcesses processes_;
  std::unique_ptr<ControlStore> store_;
  Membership members_;
  Plan plan_;
  bool published_ = false;
  int generation_ = 0, next_id_ = 0;
  std::int64_t joined_ = 0, last_step_seen_ = 0;
  std::uintmax_t metrics_offset_ = 0;
  std::vector<int> order_, joiners_, boundary_leaving_;
  std::set<int> lost_;
  // Workers the controller stopped for missed heartbeats: why, and their last beat.
  struct Stopped {
    std::string cause;
    Clock::time_point last_beat;
  };
  std::map<int, Stopped> stopped_;
  std::map<int, std::pair<std::int64_t, Clock::time_point>> beats_;
  std::string cause_;
  bool boundary_seen_ = false, stop_asked_ = false;
  Clock::time_point detected_, settle_until_, failure_seen_, last_heartbeat_check_, regroup_started_, record_detected_;
  Clock::time_point last_alive_;  // of the first loss of the change being handled
  std::optional<nlohmann::json> pending_record_;
  nlohmann::json status_;  // what `sailor-run status` prints
};

int run_inplace(const LaunchCommand& c) { return InplaceController(c).run(); }

std::string this_host() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("localhost");
}

}  // namespace

}  // namespace fleet::sailor::runtime
