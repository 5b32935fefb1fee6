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
#include "common/helper_library.h"
#include "common/output_check.h"
#include "orion/contention_model.h"
#include "orion/device_spec.h"
#include "orion/kernel_profile.h"
#include "orion/live/live_report.h"
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
  return helper_library("liborion_client.so", "ORION_CLIENT_LIBRARY",
                        "it is built when the CUDA toolkit's headers are found");
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

LiveConfig build_config(const ExecOptions& o) {
  const std::size_t commands = (o.hp ? 1 : 0) + o.be.size();
  if (commands == 0) throw InputError("nothing to run: give --hp and/or --be commands");
  // A blank command would run as a client that does nothing: most likely an
  // unset shell variable in the caller's script.
  const auto blank = [](const std::string& c) { return c.find_first_not_of(" \t\r\n") == std::string::npos; };
  if (o.hp && blank(*o.hp)) throw InputError("--hp: the command is empty");
  for (const std::string& c : o.be) {
    if (blank(c)) throw InputError("--be: a command is empty");
  }
  if (o.policy == "dedicated" || o.policy == "all") {
    throw InputError("--policy " + o.policy +
                     " is a simulator mode; exec runs one of orion, temporal, streams, mps, "
                     "reef, tick-tock");
  }
  if (!o.profiles.empty() && o.profiles.size() != commands) {
    throw InputError(
        fmt::format("--profiles: {} given for {} commands (one per command: the HP one first, then "
                    "each --be in order)",
                    o.profiles.size(), commands));
  }
  if (commands > static_cast<std::size_t>(kMaxSlots)) {
    throw InputError(fmt::format("at most {} commands", kMaxSlots));
  }
  LiveConfig config;
  config.device = device_by_name(o.device);
  config.policy = o.policy;
  o.tuning.validate();
  config.policy_options = o.tuning;
  config.release_ahead_us = o.release_ahead_us;
  if (o.contention) config.contention = load_contention_model(*o.contention);
  config.max_be_wait_us = o.tuning.max_be_wait_ms * 1e3;
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

// One run of some of the commands under one scheduler, on a segment of its own.
struct RunOutcome {
  std::vector<LiveClientStats> stats;
  std::vector<double> ran_s;  ///< per command: seconds from its start to our SIGTERM, or to its exit
  int code = 0;               ///< the HP command's exit code, else the first failing command's, else 0
  int forwarded_signal = 0;   ///< SIGINT / SIGTERM that reached us and was passed on
};

struct RunSetup {
  const ExecOptions& options;
  const std::filesystem::path& library;
  const MpsEnvironment& mps;
};

// `time_limits_s`: per command, seconds after which it is stopped like a
// best-effort command at the HP command's end (< 0: none).
RunOutcome run_commands(const RunSetup& setup, LiveConfig config, std::vector<Child> children,
                        const std::vector<double>& time_limits_s, std::FILE* log) {
  const ExecOptions& o = setup.options;
  Segment segment = Segment::create(segment_path());
  segment.header()->scheduler_pid.store(getpid());
  LiveScheduler scheduler(segment.header(), std::move(config));  // checks the policy against the clients
  if (log != nullptr) scheduler.set_log(log);

  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  std::vector<std::optional<Clock::time_point>> kill_at(children.size());
  RunOutcome out;
  out.ran_s.assign(children.size(), -1);
  auto seconds_since_start = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  auto stop_child = [&](std::size_t i) {
    Child& c = children[i];
    if (c.stopped_by_us || c.exited) return;
    c.stopped_by_us = true;
    out.ran_s[i] = seconds_since_start();
    kill(-c.pid, SIGTERM);
    kill_at[i] = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
  };

  std::atomic<bool> stop{false};
  std::thread scheduler_thread([&] { scheduler.run(stop); });
  for (std::size_t i = 0; i < children.size(); ++i) {
    children[i].pid = spawn(children[i], static_cast<int>(i), segment.path(), setup.library, setup.mps);
  }
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (std::size_t i = 0; i < children.size(); ++i) {
        if (children[i].pid != pid) continue;
        children[i].exited = true;
        children[i].status = status;
        if (out.ran_s[i] < 0) out.ran_s[i] = seconds_since_start();
      }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;  // the commands and everything they started have exited
    if (const int sig = g_signal.exchange(0); sig != 0) {
      out.forwarded_signal = sig;
      for (const Child& c : children) kill(-c.pid, sig);
    }
    const bool hp_done = !children.empty() && children.front().high_priority && children.front().exited;
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (children[i].high_priority) continue;
      // Best-effort work runs as long as the HP job, as in Orion's experiments.
      if (hp_done && !o.wait_be) stop_child(i);
      if (time_limits_s[i] >= 0 && seconds_since_start() >= time_limits_s[i]) stop_child(i);
      if (kill_at[i] && Clock::now() > *kill_at[i]) {
        kill(-children[i].pid, SIGKILL);
        kill_at[i] = Clock::time_point::max();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  scheduler_thread.join();
  scheduler.reap_dead_clients();
  segment.header()->shutting_down.store(1);

  out.stats = scheduler.stats();
  for (const Child& c : children) {
    const int child_code = exit_code_of(c.status);
    const bool expected_stop = c.stopped_by_us && (child_code == 0 || child_code == 128 + SIGTERM ||
                                                   child_code == 128 + SIGKILL || child_code == 143);
    if (child_code != 0 && !expected_stop && out.code == 0) out.code = child_code;
    if (c.high_priority) out.code = child_code != 0 ? child_code : out.code;
  }
  if (out.forwarded_signal != 0 && out.code == 0) out.code = 128 + out.forwarded_signal;
  return out;
}

// --log: the log file is written under a temporary name and renamed when
// the run ends, so a failed start leaves an existing log as it was.
class ExecLog {
 public:
  explicit ExecLog(const ExecOptions& o) {
    if (!o.log) return;
    if (*o.log == "-") throw InputError("--log: give a file (the commands own standard output)");
    OutputCheck check;
    for (const auto& p : o.profiles) check.input(p, "--profiles");
    check.file(*o.log, "--log").check(Existing::kReplace);
    path_ = *o.log;
  }
  ExecLog(const ExecLog&) = delete;
  ExecLog& operator=(const ExecLog&) = delete;
  ~ExecLog() {
    if (file_ != nullptr) std::fclose(file_);
  }
  void open() {
    if (!path_) return;
    tmp_ = path_->string() + ".tmp-" + std::to_string(getpid());
    file_ = std::fopen(tmp_.c_str(), "w");
    if (file_ == nullptr) throw RuntimeFailure("cannot write " + tmp_ + ": " + std::strerror(errno));
  }
  std::FILE* file() const { return file_; }
  void finish() {
    if (file_ == nullptr) return;
    std::fclose(file_);
    file_ = nullptr;
    std::filesystem::rename(tmp_, *path_);
  }

 private:
  std::optional<std::filesystem::path> path_;
  std::string tmp_;
  std::FILE* file_ = nullptr;
};

// SIGINT and SIGTERM are forwarded to the commands; processes a command's
// shell leaves behind (a program that outlives a SIGTERMed shell) are
// re-parented to us, so we wait for every one of them before the report: a
// command is done when all its processes are.
void take_signals_and_orphans() {
  struct sigaction sa {};
  sa.sa_handler = remember_exec_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

// --alone: each command by itself (no gating: policy mps with one client),
// a best-effort one for as long as it ran beside the others when they
// stopped it, so both runs see the same start-up and about the same work.
// Returns each command's statistics (none when a signal ended a run) and
// updates `code` with the first failure.
std::vector<LiveClientStats> run_each_alone(const RunSetup& setup, const LiveConfig& config,
                                            const std::vector<Child>& children, const RunOutcome& together, int& code) {
  const ExecOptions& o = setup.options;
  std::vector<LiveClientStats> alone;
  for (std::size_t i = 0; i < children.size(); ++i) {
    LiveConfig single = config;
    single.clients = {config.clients[i]};
    single.policy = "mps";
    const bool limited = !children[i].high_priority && o.hp && !o.wait_be;
    std::fprintf(stderr, "orion-run exec: %s alone%s\n", config.clients[i].name.c_str(),
                 limited ? fmt::format(" for {:.1f} s", together.ran_s[i]).c_str() : "");
    const RunOutcome a = run_commands(setup, single, {Child{children[i].command, children[i].high_priority}},
                                      {limited ? together.ran_s[i] : -1.0}, nullptr);
    alone.push_back(a.stats.at(0));
    if (a.forwarded_signal != 0) {
      code = a.code;
      return {};
    }
    if (a.code != 0) {
      std::fprintf(stderr, "orion-run exec: %s exited with %d when run alone\n", config.clients[i].name.c_str(),
                   a.code);
      if (code == 0) code = a.code;
    }
  }
  return alone;
}

}  // namespace

ExecOutcome exec_commands(const ExecOptions& o) {
  // Everything that can be wrong with the input is found before anything starts.
  LiveConfig config = build_config(o);
  ExecLog log(o);
  {
    // The policy against the clients, before anything starts.
    Segment probe = Segment::create(segment_path());
    LiveScheduler check(probe.header(), config);
  }
  const std::filesystem::path library = client_library();
  MpsEnvironment mps = prepare_mps(o.start_mps);
  struct StopMpsAtExit {
    MpsEnvironment& mps;
    ~StopMpsAtExit() { stop_mps(mps); }
  } stop_mps_at_exit{mps};
  if (!mps.running && !mps.notice.empty()) std::fprintf(stderr, "orion-run exec: %s\n", mps.notice.c_str());
  log.open();

  std::vector<Child> children;
  if (o.hp) children.push_back(Child{*o.hp, true});
  for (const std::string& b : o.be) children.push_back(Child{b, false});
  take_signals_and_orphans();

  const RunSetup setup{o, library, mps};
  const RunOutcome together =
      run_commands(setup, config, children, std::vector<double>(children.size(), -1), log.file());
  log.finish();
  int code = together.code;
  std::vector<LiveClientStats> alone;
  if (o.alone && together.code != 0 && together.forwarded_signal == 0) {
    std::fprintf(stderr, "orion-run exec: the shared run failed (exit %d); the commands are not run alone\n",
                 together.code);
  }
  if (o.alone && together.code == 0) alone = run_each_alone(setup, config, children, together, code);

  ExecOutcome outcome;
  outcome.code = code;
  if (o.report || o.alone) {
    if (const std::string notice = early_window_end_notice(together.stats); !notice.empty()) {
      std::fprintf(stderr, "orion-run exec: %s\n", notice.c_str());
    }
    outcome.report = report_json(together.stats, config.policy, alone);
  }
  return outcome;
}

}  // namespace fleet::orion::live
