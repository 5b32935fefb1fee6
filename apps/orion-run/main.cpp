// orion-run: collocate a latency-critical job with best-effort jobs on one GPU under Orion's kernel scheduling.
#include "cli/cli.h"
#include "devices/device_info.h"
#include "orion-run/simulate_command.h"
#include "orion-run/exec_report.h"

namespace {

// The policies' tunables, one set of flags for simulate and exec alike
// (`online_tuning`: --hp-limit, which only the simulator runs).
void add_policy_flags(CLI::App* app, fleet::orion::PolicyOptions& o, bool online_tuning) {
  app->add_option("--dur-threshold", o.dur_threshold_fraction,
                  "orion: outstanding best-effort work cap, as a fraction of the HP request latency (and the co-run "
                  "slack with --hp-slowdown 0)")
      ->capture_default_str()
      ->check(fleet::in_range(1e-9, 1));
  app->add_option("--hp-slowdown", o.hp_slowdown_limit,
                  "orion: best-effort kernels run beside an HP request while it can still end within this many times "
                  "its latency on a GPU of its own (0: a fixed slack of --dur-threshold)")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e3));
  app->add_option("--sm-threshold", o.sm_threshold,
                  "orion: largest SM need of a best-effort kernel during HP requests (-1: Orion's default)")
      ->capture_default_str()
      ->check(fleet::in_range(-1, 1e6));
  if (online_tuning)
    app->add_option("--hp-limit", o.hp_limit_ms,
                    "orion, training HP client: its iteration-time target in ms; the SM threshold is then "
                    "searched online (0: off)")
        ->check(fleet::in_range(0, 1e9));
  app->add_option("--reef-queue-depth", o.reef_queue_depth,
                  "reef: best-effort kernels released and unfinished at most (REEF's bounded device queue)")
      ->capture_default_str()
      ->check(fleet::in_range(1, 1e6));
  app->add_option("--max-be-wait", o.max_be_wait_ms,
                  "Milliseconds after which a held best-effort kernel is admitted anyway and the rest of its "
                  "request served unchecked (temporal: its request goes first at the next boundary); 0: never")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e9));
}

// What `simulate` fills from the command line: the options, and the flags
// that override the workload's own settings only when given.
struct SimulateArgs {
  fleet::orion::SimulateOptions sim;
  std::string trace, csv, latencies, contention;
  std::uint64_t seed = 0;
  std::int64_t requests = 0;
  double launch_overhead_us = -1;
};

void add_simulate(fleet::Tool& tool, SimulateArgs& a) {
  CLI::App* simulate = tool.add_command(
      "simulate", "Simulate a workload on a GPU model under a policy and compare with dedicated GPUs", [&a] {
        if (!a.trace.empty()) a.sim.trace = a.trace;
        if (!a.csv.empty()) a.sim.csv = a.csv;
        if (!a.latencies.empty()) a.sim.latencies_csv = a.latencies;
        if (!a.contention.empty()) a.sim.contention = a.contention;
        if (a.seed != 0) a.sim.seed = a.seed;
        if (a.requests != 0) a.sim.requests = a.requests;
        if (a.launch_overhead_us >= 0) a.sim.launch_overhead_us = a.launch_overhead_us;
        return fleet::orion::run_simulate(a.sim);
      });
  simulate->add_option("-w,--workload", a.sim.workload, "Workload JSON (ours, or Orion's config list)")->required();
  simulate
      ->add_option(
          "-p,--policy", a.sim.policy,
          "orion, temporal, streams, mps, reef, tick-tock, dedicated, all, or a comma-separated list (one table)")
      ->capture_default_str();
  simulate->add_option("--profiles", a.sim.profile_dirs, "Folders to look for kernel profiles in (repeatable)");
  simulate->add_option("--trace", a.trace, "Write a Chrome/Perfetto timeline of the (first) policy's run")
      ->transform(fleet::output_path());
  simulate->add_option("--csv", a.csv, "Write the comparison table as CSV")->transform(fleet::output_path());
  simulate->add_option("--latencies", a.latencies, "Write every measured latency as CSV (for CDF plots)")
      ->transform(fleet::output_path());
  simulate->add_option("--contention", a.contention,
                       "Contention model JSON (docs/formats.md; default: calibrated on Orion's V100 kernel pairs)");
  simulate->add_option("--seed", a.seed, "Override the workload's random seed (arrivals)")
      ->check(fleet::in_range(0, 9.2e18));
  simulate->add_option("--requests", a.requests, "Override the request count of bounded clients")
      ->check(fleet::in_range(1, 1e7));
  simulate
      ->add_option("--launch-overhead-us", a.launch_overhead_us,
                   "Override every client's CPU time per kernel launch in us (PyTorch eager: 10-20; "
                   "default: the workload's, 5 for Orion's configs)")
      ->check(fleet::in_range(0, 1e6));
  add_policy_flags(simulate, a.sim.tuning, true);
  fleet::add_json_flag(simulate, &a.sim.json);
}

// What `exec` fills from the command line.
struct ExecArgs {
  fleet::orion::live::ExecOptions ex;
  bool exec_json = false;
  std::string hp, log, contention;
  CLI::App* command = nullptr;  ///< to ask whether --hp was given
};

void add_exec(fleet::Tool& tool, ExecArgs& a) {
  CLI::App* exec = tool.add_command(
      "exec", "Run a high-priority command beside best-effort ones on one GPU, scheduling their kernels", [&a] {
        if (a.command->count("--hp") > 0) a.ex.hp = a.hp;
        if (!a.log.empty()) a.ex.log = a.log;
        if (!a.contention.empty()) a.ex.contention = a.contention;
        return fleet::orion::live::run_exec(a.ex, a.exec_json);
      });
  a.command = exec;
  exec->add_option("--hp", a.hp, "High-priority command (shell syntax, e.g. 'python serve.py')");
  exec->add_option("--be", a.ex.be, "Best-effort command (repeatable)");
  exec->add_option("-p,--policy", a.ex.policy, "orion, temporal, streams, mps, reef, tick-tock")->capture_default_str();
  exec->add_option("--profiles", a.ex.profiles, "Kernel profiles, one per command: HP first, then each --be")
      ->delimiter(',');
  exec->add_option("--device", a.ex.device, "GPU model for SM counts and occupancy (v100, a100, h100, h200)")
      ->capture_default_str();
  add_policy_flags(exec, a.ex.tuning, false);
  exec->add_option("--release-ahead-us", a.ex.release_ahead_us,
                   "Release a held best-effort kernel this long before the one ahead of it is due to finish (its "
                   "profiled duration), hiding the hand-off between processes; 0: only on completion")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e6));
  exec->add_option("--contention", a.contention,
                   "Contention model JSON that orion charges co-running kernels with (docs/formats.md; default: "
                   "calibrated on Orion's V100 kernel pairs, as simulate)");
  exec->add_flag("--hp-trains", a.ex.hp_trains, "The HP command trains (Orion's SM threshold for training)");
  exec->add_flag("--wait-be", a.ex.wait_be, "Wait for best-effort commands instead of stopping them when HP ends");
  exec->add_option("--grace", a.ex.grace_s, "Seconds from SIGTERM to SIGKILL for stopped best-effort commands")
      ->capture_default_str()
      ->check(fleet::in_range(0, 3600));
  exec->add_flag("--start-mps", a.ex.start_mps, "Start a private CUDA MPS daemon for the commands");
  exec->add_flag("--alone", a.ex.alone,
                 "Then run each command by itself (a BE one as long as it ran beside the HP one) and report "
                 "p99 and throughput against that (implies --report)");
  exec->add_option("--log", a.log, "Write every scheduling event as JSON lines")->transform(fleet::output_path());
  exec->add_flag("--report", a.ex.report, "Print per-client latency, throughput and gating at the end");
  fleet::add_json_flag(exec, &a.exec_json);
}

}  // namespace

int main(int argc, char** argv) {
  fleet::Tool tool(
      "orion-run",
      "Collocate a latency-critical job with best-effort jobs on one GPU under Orion's kernel scheduling.");
  tool.set_version_details(fleet::devices::version_details);
  SimulateArgs simulate;
  add_simulate(tool, simulate);
  ExecArgs exec;
  add_exec(tool, exec);
  return tool.run(argc, argv);
}
