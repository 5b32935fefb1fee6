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
                  "its time alone (0: a fixed slack of --dur-threshold)")
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

}  // namespace

int main(int argc, char** argv) {
  fleet::Tool tool(
      "orion-run",
      "Collocate a latency-critical job with best-effort jobs on one GPU under Orion's kernel scheduling.");
  tool.set_version_details(fleet::devices::version_details);

  fleet::orion::SimulateOptions sim;
  std::string trace, csv, latencies, contention;
  std::uint64_t seed = 0;
  std::int64_t requests = 0;
  double launch_overhead_us = -1;
  CLI::App* simulate = tool.add_command(
      "simulate", "Simulate a workload on a GPU model under a policy and compare with dedicated GPUs", [&] {
        if (!trace.empty()) sim.trace = trace;
        if (!csv.empty()) sim.csv = csv;
        if (!latencies.empty()) sim.latencies_csv = latencies;
        if (!contention.empty()) sim.contention = contention;
        if (seed != 0) sim.seed = seed;
        if (requests != 0) sim.requests = requests;
        if (launch_overhead_us >= 0) sim.launch_overhead_us = launch_overhead_us;
        return fleet::orion::run_simulate(sim);
      });
  simulate->add_option("-w,--workload", sim.workload, "Workload JSON (ours, or Orion's config list)")->required();
  simulate
      ->add_option(
          "-p,--policy", sim.policy,
          "orion, temporal, streams, mps, reef, tick-tock, dedicated, all, or a comma-separated list (one table)")
      ->capture_default_str();
  simulate->add_option("--profiles", sim.profile_dirs, "Folders to look for kernel profiles in (repeatable)");
  simulate->add_option("--trace", trace, "Write a Chrome/Perfetto timeline of the (first) policy's run")
      ->transform(fleet::output_path());
  simulate->add_option("--csv", csv, "Write the comparison table as CSV")->transform(fleet::output_path());
  simulate->add_option("--latencies", latencies, "Write every measured latency as CSV (for CDF plots)")
      ->transform(fleet::output_path());
  simulate->add_option("--contention", contention,
                       "Contention model JSON (docs/formats.md; default: calibrated on Orion's V100 kernel pairs)");
  simulate->add_option("--seed", seed, "Override the workload's random seed (arrivals)")
      ->check(fleet::in_range(0, 9.2e18));
  simulate->add_option("--requests", requests, "Override the request count of bounded clients")
      ->check(fleet::in_range(1, 1e7));
  simulate
      ->add_option("--launch-overhead-us", launch_overhead_us,
                   "Override every client's CPU time per kernel launch in us (PyTorch eager: 10-20; "
                   "default: the workload's, 5 for Orion's configs)")
      ->check(fleet::in_range(0, 1e6));
  add_policy_flags(simulate, sim.tuning, true);
  fleet::add_json_flag(simulate, &sim.json);

  fleet::orion::live::ExecOptions ex;
  bool exec_json = false;
  std::string hp, log;
  CLI::App* exec = tool.add_command(
      "exec", "Run a high-priority command beside best-effort ones on one GPU, scheduling their kernels", [&] {
        if (exec->count("--hp") > 0) ex.hp = hp;
        if (!log.empty()) ex.log = log;
        return fleet::orion::live::run_exec(ex, exec_json);
      });
  exec->add_option("--hp", hp, "High-priority command (shell syntax, e.g. 'python serve.py')");
  exec->add_option("--be", ex.be, "Best-effort command (repeatable)");
  exec->add_option("-p,--policy", ex.policy, "orion, temporal, streams, mps, reef, tick-tock")->capture_default_str();
  exec->add_option("--profiles", ex.profiles, "Kernel profiles, one per command: HP first, then each --be")
      ->delimiter(',');
  exec->add_option("--device", ex.device, "GPU model for SM counts and occupancy (v100, a100, h100, h200)")
      ->capture_default_str();
  add_policy_flags(exec, ex.tuning, false);
  exec->add_option("--release-ahead-us", ex.release_ahead_us,
                   "Release a held best-effort kernel this long before the one ahead of it is due to finish (its "
                   "profiled duration), hiding the hand-off between processes; 0: only on completion")
      ->capture_default_str()
      ->check(fleet::in_range(0, 1e6));
  exec->add_flag("--hp-trains", ex.hp_trains, "The HP command trains (Orion's SM threshold for training)");
  exec->add_flag("--wait-be", ex.wait_be, "Wait for best-effort commands instead of stopping them when HP ends");
  exec->add_option("--grace", ex.grace_s, "Seconds from SIGTERM to SIGKILL for stopped best-effort commands")
      ->capture_default_str()
      ->check(fleet::in_range(0, 3600));
  exec->add_flag("--start-mps", ex.start_mps, "Start a private CUDA MPS daemon for the commands");
  exec->add_flag("--alone", ex.alone,
                 "Then run each command by itself (a BE one as long as it ran beside the HP one) and report "
                 "p99 and throughput against that (implies --report)");
  exec->add_option("--log", log, "Write every scheduling event as JSON lines")->transform(fleet::output_path());
  exec->add_flag("--report", ex.report, "Print per-client latency, throughput and gating at the end");
  fleet::add_json_flag(exec, &exec_json);
  return tool.run(argc, argv);
}
