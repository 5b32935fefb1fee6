#include "sailor-run/launch_commands.h"

#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "sailor/runtime/torch/control_store.h"
#include "sailor/runtime/torch/elastic.h"

namespace fleet {
namespace sailor::runtime {
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

}  // namespace sailor::runtime

namespace {

using namespace fleet::sailor::runtime;

// What every plan of an elastic job optimises and must meet (the first and
// each re-plan); a change that leaves no plan within them stops the job.
void add_plan_bounds(CLI::App* cmd, sailor::runtime::LaunchCommand& c) {
  cmd->add_option("--objective", c.objective, "Elastic: what each (re-)plan optimises, throughput, cost or energy")
      ->capture_default_str()
      ->check(CLI::IsMember({"throughput", "cost", "energy"}));
  cmd->add_option("--min-throughput", c.min_throughput,
                  "Elastic: iterations/s every plan must reach; fewer workers than that needs stop the job (0: none)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--max-cost-per-iter", c.max_cost_per_iter, "Elastic: $ per iteration no plan may exceed (0: none)")
      ->check(CLI::Range(0.0, 1e12));
  cmd->add_option("--max-energy-per-iter", c.max_energy_per_iter,
                  "Elastic: joules per iteration, all GPUs together, no plan may exceed (0: none)")
      ->check(CLI::Range(0.0, 1e15));
}

void add_launch(Tool& tool, LaunchCommands& c) {
  auto& launch = c.launch;
  CLI::App* cmd = tool.add_command(
      "launch", "Start the workers of a job on this machine: sailor-run launch --nprocs N -- train ...",
      [&c] { return c.launch.elastic_inputs.empty() ? run_launch(c.launch) : run_elastic_launch(c.launch); });
  cmd->add_option("--nprocs", launch.nprocs, "Workers to start (default: as many as --plan needs)")
      ->check(in_range(1, 1024));
  cmd->add_option("--plan", launch.plan, "Plan to hand to every worker as --plan")->check(CLI::ExistingFile);
  cmd->add_option("--master-port", launch.master_port,
                  "Rendezvous (elastic: controller) port on 127.0.0.1 (default: a free one)")
      ->check(in_range(1, 65535));
  cmd->add_option("--grace", launch.grace_seconds, "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str()
      ->check(in_range(0, 3600));
  cmd->add_option("--elastic", launch.elastic_inputs,
                  "Planner inputs folder: re-plan and go on when workers are lost, leave or join")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--recovery", launch.recovery,
                  "Elastic recovery: inplace (survivors hand their state over) or restart (from the last checkpoint)")
      ->capture_default_str();
  cmd->add_option("--max-reconfigurations", launch.max_reconfigurations, "Elastic: give up after this many")
      ->capture_default_str()
      ->check(in_range(0, 1e6));
  cmd->add_option("--heartbeat-timeout", launch.heartbeat_timeout_seconds,
                  "Elastic: seconds without a heartbeat (inplace; 10x this from a worker's start to its first), "
                  "or stopped (restart: SIGSTOP), after which a worker is taken for lost")
      ->capture_default_str()
      ->check(in_range(0.5, 1e6));
  add_plan_bounds(cmd, launch);
  cmd->add_option("worker", launch.arguments, "The workers' sailor-run command, after --")->required();
}

void add_controller(Tool& tool, LaunchCommands& c) {
  auto& ctl = c.controller;
  ctl.external_workers = true;
  ctl.master_port = 29400;
  CLI::App* controller =
      tool.add_command("controller",
                       "Coordinate an elastic job whose workers start elsewhere (srun steps running `train` with "
                       "SAILOR_CONTROL=HOST:PORT): register them, plan, re-plan when they are lost or join",
                       [&c] { return run_elastic_launch(c.controller); });
  controller->add_option("--elastic", ctl.elastic_inputs, "Planner inputs folder to plan and re-plan with")
      ->required()
      ->check(CLI::ExistingDirectory);
  controller->add_option("--workers", ctl.nprocs, "Workers to wait for before the first generation")
      ->required()
      ->check(in_range(1, 1024));
  controller->add_option("--port", ctl.master_port, "Port to serve the job's store on (every interface)")
      ->capture_default_str()
      ->check(in_range(1, 65535));
  controller->add_option("--plan", ctl.plan, "First plan (default: the search's best for --workers)")
      ->check(CLI::ExistingFile);
  controller
      ->add_option("--heartbeat-timeout", ctl.heartbeat_timeout_seconds,
                   "Seconds without a heartbeat after which a worker is taken for lost (1.5 once a peer "
                   "reported a lost connection; 10x this from a worker's start to its first heartbeat or "
                   "registration)")
      ->capture_default_str()
      ->check(in_range(0.5, 1e6));
  controller->add_option("--max-reconfigurations", ctl.max_reconfigurations, "Give up after this many")
      ->capture_default_str()
      ->check(in_range(0, 1e6));
  add_plan_bounds(controller, ctl);
  controller->add_option("--output", ctl.output, "The workers' -o folder (named when the job stops without a plan)")
      ->transform(output_path());
  controller
      ->add_option("--metrics", ctl.metrics,
                   "The workers' --metrics file (shared file system): reconfiguration records go there too")
      ->transform(output_path());
}

void add_join_and_status(Tool& tool, LaunchCommands& c) {
  CLI::App* join = tool.add_command("join", "Ask a running elastic job (launch --elastic) for more workers",
                                    [&c] { return run_join(c.job); });
  join->add_option("--controller", c.job.address, "HOST:PORT the elastic launcher printed")->required();
  join->add_option("--workers", c.job.join_workers, "Workers to add on the launcher's machine")
      ->capture_default_str()
      ->check(in_range(1, 1024));

  CLI::App* status = tool.add_command("status", "Print a running elastic job's generation, plan and members",
                                      [&c] { return run_status(c.job); });
  status->add_option("--controller", c.job.address, "HOST:PORT the elastic launcher printed")->required();
  add_json_flag(status, &c.job.json);
}

}  // namespace

void add_launch_commands(Tool& tool, LaunchCommands& c) {
  add_launch(tool, c);
  add_controller(tool, c);
  add_join_and_status(tool, c);
}

}  // namespace fleet
