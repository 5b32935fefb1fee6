// `sailor-run launch`: starts the workers of a job on this machine, the way
// torchrun does — each a child process with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT — prefixes
// every line they log (standard error) with their rank, passes their
// standard output through whole lines at a time (only rank 0 prints
// results), stops them all when one fails and returns the first failure's
// exit code. No libtorch.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fleet::sailor::runtime {

struct LaunchCommand {
  int nprocs = 0;                      ///< 0: as many as the plan needs
  std::filesystem::path plan;          ///< passed to the workers as --plan; sizes the job without --nprocs
  int master_port = 0;                 ///< 0: a free port
  double grace_seconds = 10;           ///< after a failure, SIGTERM, then SIGKILL after this long
  std::vector<std::string> arguments;  ///< the worker's sailor-run subcommand and its options
  std::filesystem::path program;       ///< the worker program (default: this executable)
  // Elastic jobs (docs/training-runtime.md, "Elastic jobs"):
  std::filesystem::path elastic_inputs;  ///< planner inputs folder; set: survive lost workers by re-planning
  std::string recovery = "inplace";      ///< inplace (survivors keep their state) or restart (all, from the checkpoint)
  int max_reconfigurations = 16;         ///< give up after this many
  double heartbeat_timeout_seconds = 30;  ///< inplace: a worker silent this long is taken for lost
  std::string objective = "throughput";   ///< what every (re-)plan optimises: throughput, cost or energy
  double min_throughput = 0;              ///< iterations/s every plan must reach (0: no bound)
  double max_cost_per_iter = 0;           ///< $ per iteration no plan may exceed (0: no bound)
  double max_energy_per_iter = 0;         ///< J per iteration no plan may exceed (0: no bound)
  // `sailor-run controller`: the workers start elsewhere (srun steps) and register themselves.
  bool external_workers = false;
  std::filesystem::path output;   ///< their -o (for messages about the checkpoint)
  std::filesystem::path metrics;  ///< their --metrics, on a shared file system (for the records)
};

/// Worker processes of this machine, each running the worker program with
/// some environment: started, their output passed through line by line
/// (standard error prefixed with "[LABEL N] "), reaped, signalled.
class WorkerProcesses {
 public:
  WorkerProcesses(const LaunchCommand& command, std::string label);
  ~WorkerProcesses();  ///< SIGKILLs and reaps what still runs
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  /// Starts worker `id` running `args` with `env` added to this environment.
  void start(int id, const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env);
  struct Exit {
    int id = 0;
    int status = 0;                ///< as waitpid reports it
    int code = 0;                  ///< the exit status, or 128 + signal
    std::string describe() const;  ///< "worker 2 killed by signal 9"
  };
  /// Passes output through for up to `timeout_ms`; returns the workers that exited since the last call.
  std::vector<Exit> poll(int timeout_ms);
  void signal(int id, int sig);
  void signal_all(int sig);
  bool running(int id) const;
  /// Workers still running or with output not yet passed through.
  int active() const;
  pid_t pid(int id) const;
  /// Running workers the kernel shows stopped (SIGSTOP, a debugger): each
  /// with when it was first seen so. A stopped worker holds its peers in
  /// their collectives until --timeout; an elastic job takes it for lost
  /// after the heartbeat timeout instead.
  std::map<int, std::chrono::steady_clock::time_point> stopped();

 private:
  struct Process;
  const LaunchCommand& command_;
  std::string label_;
  std::map<int, Process> processes_;
};

/// How one set of workers ended.
struct WorkerOutcome {
  int exit_code = 0;                 ///< 0, or the first failure's status (128 + signal)
  int failed_rank = -1;              ///< the first worker that failed
  std::string cause;                 ///< "worker 2 killed by signal 9"
  bool interrupted = false;          ///< the launcher itself got SIGINT/SIGTERM
  std::vector<int> left_ranks;       ///< workers that left at a step boundary after SIGTERM (elastic)
  bool stopped_at_boundary = false;  ///< the workers stopped together at a step boundary (elastic)
  std::chrono::steady_clock::time_point failed_at, all_stopped_at;
  /// The failed worker's last sign of life (when it was first seen stopped;
  /// its exit): failed_at - last_alive is how long detecting it took.
  std::chrono::steady_clock::time_point last_alive;
};

/// The variables torchrun gives rank `rank` of `world` whose rendezvous is addr:port.
std::vector<std::pair<std::string, std::string>> worker_environment(int rank, int world, const std::string& addr,
                                                                    int port);

/// While it lives, SIGINT and SIGTERM to this process are remembered instead of ending it.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// 0, or the last signal received.
  int received() const;

 private:
  struct sigaction* old_ = nullptr;
};

/// Starts `world` workers running `args` and supervises them until every one
/// has exited; the first failure stops the others. `on_tick` runs about
/// every 100 ms while they run.
WorkerOutcome run_workers(const LaunchCommand& command, const std::vector<std::string>& args, int world, int port,
                          const std::function<void()>& on_tick = {});

/// Runs the workers and returns 0, or the exit status of the first worker
/// that failed (128 + signal for one killed by a signal).
int run_launch(const LaunchCommand& command);

/// A TCP port on 127.0.0.1 that nothing listens on right now.
int free_local_port();

}  // namespace fleet::sailor::runtime
