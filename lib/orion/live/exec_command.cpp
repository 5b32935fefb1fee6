#include "orion/live/exec_command.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/output_check.h"
#include "common/stats.h"
#include "orion/device.h"
#include "orion/kernel_profile.h"
#include "orion/live/live_scheduler.h"
#include "orion/live/mps.h"
#include "orion/live/shm_segment.h"

namespace fleet::orion::live {
namespace {

std::atomic<int> g_signal{0};
extern "C" void remember_exec_signal(int sig) { g_signal = sig; }

struct Child {
  std::string command;
  bool high_priority = false;
  pid_t pid = -1;
  bool exited = false;
  bool stopped_by_us = false;
  int status = 0;
};

std::filesystem::path client_library() {
  if (const char* env = std::getenv("ORION_CLIENT_LIBRARY"); env != nullptr && *env != '\0') {
    if (!std::filesystem::exists(env)) throw InputError(std::string("ORION_CLIENT_LIBRARY: no such file ") + env);
    return env;
  }
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path lib = self.parent_path() / "liborion_client.so";
  if (ec || !std::filesystem::exists(lib)) {
    throw InputError("the interposer liborion_client.so is not next to orion-run (" + lib.string() +
                     "); it is built when the CUDA toolkit's headers are found, or set ORION_CLIENT_LIBRARY");
  }
  return lib;
}

std::string segment_path() {
  std::random_device rd;
  return fmt::format("/dev/shm/orion-{}-{:08x}", getpid(), rd());
}

pid_t spawn(const Child& c, int index, const std::string& segment, const std::filesystem::path& library,
            const MpsEnvironment& mps) {
  const pid_t pid = fork();
  if (pid < 0) throw RuntimeFailure(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) return pid;
  setpgid(0, 0);  // its own group: signals reach the shell and what it started
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  std::string preload = library.string();
  if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing != '\0') {
    preload += std::string(":") + existing;
  }
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv(kEnvSegment, segment.c_str(), 1);
  setenv(kEnvClient, std::to_string(index).c_str(), 1);
  setenv(kEnvRole, c.high_priority ? "hp" : "be", 1);
  for (const auto& [name, value] : mps.variables) setenv(name.c_str(), value.c_str(), 1);
  execl("/bin/sh", "sh", "-c", c.command.c_str(), static_cast<char*>(nullptr));
  std::fprintf(stderr, "orion-run exec: cannot run /bin/sh: %s\n", std::strerror(errno));
  _exit(127);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

double percentile_of(std::vector<double> v, double p) { return v.empty() ? 0 : percentile(v, p); }

nlohmann::json report_json(const std::vector<LiveClientStats>& stats, const std::string& policy) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const LiveClientStats& s = stats[i];
    const double span_s = (s.last_ns - s.first_ns) / 1e9;
    rows.push_back({{"policy", policy},
                    {"client", s.name},
                    {"role", s.high_priority ? "high" : "best-effort"},
                    {"processes", s.processes},
                    {"lost_processes", s.lost_processes},
                    {"requests", s.requests},
                    {"p50_ms", percentile_of(s.latencies_ms, 50)},
                    {"p95_ms", percentile_of(s.latencies_ms, 95)},
                    {"p99_ms", percentile_of(s.latencies_ms, 99)},
                    {"throughput_per_s", common_window_throughput(stats, i)},
                    {"kernels", s.kernels},
                    {"kernels_per_s", span_s > 0 ? s.kernels / span_s : 0},
                    {"kernels_not_in_profile", s.unmatched},
                    {"kernels_held", s.held},
                    {"kernels_released_ahead", s.released_ahead},
                    {"held_ms", s.held_ms}});
  }
  return {{"rows", rows}};
}

std::string report_table(const nlohmann::json& report) {
  std::string out = fmt::format("{:<10} {:<22} {:<5} {:>7} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9}\n", "policy",
                                "client", "role", "done", "p50 ms", "p95 ms", "p99 ms", "thru /s", "kernels", "held",
                                "held ms");
  for (const auto& r : report["rows"]) {
    out += fmt::format("{:<10} {:<22} {:<5} {:>7} {:>9.2f} {:>9.2f} {:>9.2f} {:>10.2f} {:>9} {:>9} {:>9.1f}\n",
                       r["policy"].get<std::string>(), r["client"].get<std::string>().substr(0, 22),
                       r["role"] == "high" ? "HP" : "BE", r["requests"].get<std::int64_t>(), r["p50_ms"].get<double>(),
                       r["p95_ms"].get<double>(), r["p99_ms"].get<double>(), r["throughput_per_s"].get<double>(),
                       r["kernels"].get<std::int64_t>(), r["kernels_held"].get<std::int64_t>(),
                       r["held_ms"].get<double>());
  }
  return out;
}

LiveConfig build_config(const ExecOptions& o) {
  const std::size_t commands = (o.hp ? 1 : 0) + o.be.size();
  if (commands == 0) throw InputError("nothing to run: give --hp and/or --be commands");
  if (o.policy == "dedicated" || o.policy == "all") {
    throw InputError("--policy " + o.policy + " is a simulator mode; exec runs one of orion, temporal, streams, mps, "
                     "reef, tick-tock");
  }
  if (!o.profiles.empty() && o.profiles.size() != commands) {
    throw InputError(fmt::format("--profiles: {} given for {} commands (one per command: the HP one first, then "
                                 "each --be in order)",
                                 o.profiles.size(), commands));
  }
  if (commands > static_cast<std::size_t>(kMaxSlots)) {
    throw InputError(fmt::format("at most {} commands", kMaxSlots));
  }
  LiveConfig config;
  config.device = device_by_name(o.device);
  config.policy = o.policy;
  config.policy_options.sm_threshold = o.sm_threshold;
  config.policy_options.dur_threshold_fraction = o.dur_threshold;
  config.policy_options.reef_queue_depth = o.reef_queue_depth;
  config.release_ahead_us = o.release_ahead_us;
  std::size_t i = 0;
  auto add = [&](bool hp) {
    LiveClient c;
    c.name = fmt::format("{}{}", hp ? "hp" : "be", hp ? std::string() : std::to_string(i - (o.hp ? 1 : 0)));
    c.high_priority = hp;
    c.training = hp ? o.hp_trains : true;
    if (o.policy == "tick-tock") c.training = true;
    if (!o.profiles.empty()) c.profile = read_kernel_profile(o.profiles[i]);
    config.clients.push_back(std::move(c));
    ++i;
  };
  if (o.hp) add(true);
  for (std::size_t b = 0; b < o.be.size(); ++b) add(false);
  return config;
}

}  // namespace

int run_exec(const ExecOptions& o) {
  // Everything that can be wrong with the input is found before anything starts.
  LiveConfig config = build_config(o);
  std::optional<std::filesystem::path> log_path;
  if (o.log) {
    if (*o.log == "-") throw InputError("--log: give a file (the commands own standard output)");
    OutputCheck check;
    for (const auto& p : o.profiles) check.input(p, "--profiles");
    check.file(*o.log, "--log").check(Existing::kReplace);
    log_path = *o.log;
  }
  Segment segment = Segment::create(segment_path());
  segment.header()->scheduler_pid.store(getpid());
  const std::string policy_name = config.policy;
  LiveScheduler scheduler(segment.header(), std::move(config));  // checks the policy against the clients
  const std::filesystem::path library = client_library();
  MpsEnvironment mps = prepare_mps(o.start_mps);
  struct StopMpsAtExit {
    MpsEnvironment& mps;
    ~StopMpsAtExit() { stop_mps(mps); }
  } stop_mps_at_exit{mps};
  if (!mps.running && !mps.notice.empty()) std::fprintf(stderr, "orion-run exec: %s\n", mps.notice.c_str());
  std::FILE* log = nullptr;
  std::string log_tmp;
  if (log_path) {
    log_tmp = log_path->string() + ".tmp-" + std::to_string(getpid());
    log = std::fopen(log_tmp.c_str(), "w");
    if (log == nullptr) throw RuntimeFailure("cannot write " + log_tmp + ": " + std::strerror(errno));
    scheduler.set_log(log);
  }

  std::vector<Child> children;
  if (o.hp) children.push_back(Child{*o.hp, true});
  for (const std::string& b : o.be) children.push_back(Child{b, false});

  struct sigaction sa {};
  sa.sa_handler = remember_exec_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Processes a command's shell leaves behind (a program that outlives a
  // SIGTERMed shell) are re-parented to us, so we wait for every one of them
  // before the report: a command is done when all its processes are.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::atomic<bool> stop{false};
  std::thread scheduler_thread([&] { scheduler.run(stop); });
  for (std::size_t i = 0; i < children.size(); ++i) {
    children[i].pid = spawn(children[i], static_cast<int>(i), segment.path(), library, mps);
  }

  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> kill_at;
  int forwarded = 0;
  auto signal_group = [&](bool best_effort_only, int sig) {
    for (Child& c : children) {
      if (best_effort_only && c.high_priority) continue;
      if (best_effort_only) c.stopped_by_us = true;
      kill(-c.pid, sig);
    }
  };
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (Child& c : children) {
        if (c.pid == pid) {
          c.exited = true;
          c.status = status;
        }
      }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;  // the commands and everything they started have exited
    if (const int sig = g_signal.exchange(0); sig != 0) {
      forwarded = sig;
      signal_group(false, sig);
    }
    const bool hp_done = o.hp && children.front().exited;
    if (hp_done && !o.wait_be && !kill_at) {
      signal_group(true, SIGTERM);  // best-effort work runs as long as the HP job, as in Orion's experiments
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
    }
    if (kill_at && Clock::now() > *kill_at) {
      signal_group(true, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  scheduler_thread.join();
  scheduler.reap_dead_clients();
  segment.header()->shutting_down.store(1);

  if (log != nullptr) {
    std::fclose(log);
    std::filesystem::rename(log_tmp, *log_path);
  }
  const nlohmann::json report = report_json(scheduler.stats(), policy_name);
  if (o.report) {
    if (o.json) std::printf("%s\n", report.dump(2).c_str());
    else std::printf("%s", report_table(report).c_str());
  }
  int code = 0;
  for (const Child& c : children) {
    const int child_code = exit_code_of(c.status);
    const bool expected_stop = c.stopped_by_us && (child_code == 0 || child_code == 128 + SIGTERM ||
                                                   child_code == 128 + SIGKILL || child_code == 143);
    if (child_code != 0 && !expected_stop && code == 0) code = child_code;
    if (c.high_priority) code = child_code != 0 ? child_code : code;
  }
  if (forwarded != 0 && code == 0) code = 128 + forwarded;
  return code;
}

}  // namespace fleet::orion::live
