#include "sailor/runtime/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"
#include "common/logging.h"
#include "sailor/plan.h"
#include "sailor/runtime/elastic_plan.h"

namespace fleet::sailor::runtime {
namespace {

std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal = sig; }

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Reads what is there and writes complete lines, each prefixed with
// `prefix` (so lines of different workers never interleave mid-line).
// Returns false at end of file.
bool pump(int& fd, std::string& tail, const std::string& prefix, int to) {
  char buffer[65536];
  ssize_t n = ::read(fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!tail.empty()) write_all(to, prefix + tail + "\n");
    tail.clear();
    ::close(fd);
    fd = -1;
    return false;
  }
  tail.append(buffer, static_cast<std::size_t>(n));
  std::size_t start = 0, end;
  std::string lines;
  while ((end = tail.find('\n', start)) != std::string::npos) {
    lines += prefix;
    lines += tail.substr(start, end - start + 1);
    start = end + 1;
  }
  tail.erase(0, start);
  write_all(to, lines);
  return true;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

[[noreturn]] void exec_worker(const LaunchCommand& c, const std::vector<std::string>& args,
                              const std::vector<std::pair<std::string, std::string>>& env, int out, int err) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans if the launcher dies
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  const std::string program = c.program.empty() ? "/proc/self/exe" : c.program.string();
  std::string name = "sailor-run";
  argv.push_back(name.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  std::string msg = fmt::format("sailor-run: error: cannot start the worker: {}\n", std::strerror(errno));
  write_all(STDERR_FILENO, msg);
  ::_exit(127);
}

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw IoError(std::string("cannot find a free port: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct WorkerProcesses::Process {
  pid_t pid = -1;
  int out = -1, err = -1;
  std::string out_tail, err_tail;  // a line not yet complete
  bool exited = false;
  std::optional<std::chrono::steady_clock::time_point> stopped_since;
};

namespace {

// The state letter /proc/PID/stat gives (R, S, D, T, t, Z, ...), or 0.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto paren = text.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : 0;
}

}  // namespace

std::map<int, std::chrono::steady_clock::time_point> WorkerProcesses::stopped() {
  std::map<int, std::chrono::steady_clock::time_point> out;
  for (auto& [id, p] : processes_) {
    if (p.exited) continue;
    const char state = process_state(p.pid);
    if (state == 'T' || state == 't') {
      if (!p.stopped_since) p.stopped_since = std::chrono::steady_clock::now();
      out[id] = *p.stopped_since;
    } else {
      p.stopped_since.reset();
    }
  }
  return out;
}

WorkerProcesses::WorkerProcesses(const LaunchCommand& command, std::string label)
    : command_(command), label_(std::move(label)) {}

WorkerProcesses::~WorkerProcesses() {
  for (auto& [id, p] : processes_) {
    if (!p.exited) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
    }
    if (p.out >= 0) ::close(p.out);
    if (p.err >= 0) ::close(p.err);
  }
}

void WorkerProcesses::start(int id, const std::vector<std::string>& args,
                            const std::vector<std::pair<std::string, std::string>>& env) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw IoError(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) exec_worker(command_, args, env, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  Process& p = processes_[id];
  p.pid = pid;
  p.out = out[0];
  p.err = err[0];
}

std::string WorkerProcesses::Exit::describe() const {
  return WIFSIGNALED(status) ? fmt::format("worker {} killed by signal {}", id, WTERMSIG(status))
                             : fmt::format("worker {} exited with status {}", id, code);
}

std::vector<WorkerProcesses::Exit> WorkerProcesses::poll(int timeout_ms) {
  std::vector<pollfd> fds;
  for (auto& [id, p] : processes_) {
    if (p.out >= 0) fds.push_back({p.out, POLLIN, 0});
    if (p.err >= 0) fds.push_back({p.err, POLLIN, 0});
  }
  if (!fds.empty())
    ::poll(fds.data(), fds.size(), timeout_ms);
  else
    ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);  // exited workers are reaped below
  for (auto& [id, p] : processes_) {
    const std::string prefix = fmt::format("[{} {}] ", label_, id);
    for (const auto& f : fds) {
      if (f.revents == 0) continue;
      if (f.fd == p.out && p.out >= 0) pump(p.out, p.out_tail, "", STDOUT_FILENO);
      if (f.fd == p.err && p.err >= 0) pump(p.err, p.err_tail, prefix, STDERR_FILENO);
    }
  }
  std::vector<Exit> exits;
  for (auto& [id, p] : processes_) {
    int status = 0;
    if (!p.exited && ::waitpid(p.pid, &status, WNOHANG) == p.pid) {
      p.exited = true;
      exits.push_back({id, status, exit_code_of(status)});
    }
  }
  return exits;
}

void WorkerProcesses::signal(int id, int sig) {
  auto it = processes_.find(id);
  if (it != processes_.end() && !it->second.exited) ::kill(it->second.pid, sig);
}

void WorkerProcesses::signal_all(int sig) {
  for (auto& [id, p] : processes_)
    if (!p.exited) ::kill(p.pid, sig);
}

bool WorkerProcesses::running(int id) const {
  auto it = processes_.find(id);
  return it != processes_.end() && !it->second.exited;
}

int WorkerProcesses::active() const {
  int n = 0;
  for (const auto& [id, p] : processes_) n += !p.exited || p.out >= 0 || p.err >= 0;
  return n;
}

pid_t WorkerProcesses::pid(int id) const {
  auto it = processes_.find(id);
  return it == processes_.end() ? -1 : it->second.pid;
}

StopSignals::StopSignals() : old_(new struct sigaction[2]) {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &old_[0]);
  ::sigaction(SIGTERM, &action, &old_[1]);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &old_[0], nullptr);
  ::sigaction(SIGTERM, &old_[1], nullptr);
  delete[] old_;
}

int StopSignals::received() const { return g_signal.load(); }

std::vector<std::pair<std::string, std::string>> worker_environment(int rank, int world, const std::string& addr,
                                                                    int port) {
  return {{"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", addr},
          {"MASTER_PORT", std::to_string(port)}};
}

WorkerOutcome run_workers(const LaunchCommand& c, const std::vector<std::string>& args, int world, int port,
                          const std::function<void()>& on_tick) {
  const StopSignals signals;
  WorkerProcesses workers(c, "rank");
  for (int r = 0; r < world; ++r) {
    auto env = worker_environment(r, world, "127.0.0.1", port);
    if (!c.elastic_inputs.empty()) env.emplace_back(kEnvElastic, "1");
    workers.start(r, args, env);
  }

  WorkerOutcome outcome;
  bool stopping = false;
  auto stop_time = std::chrono::steady_clock::now();
  bool killed = false;
  while (workers.active() > 0) {
    for (const auto& e : workers.poll(100)) {
      if (e.code == kExitPreempted) outcome.left_ranks.push_back(e.id);
      // Leaving at a step boundary is orderly: the others stop at the same one by themselves.
      const bool orderly = e.code == kExitPreempted || e.code == kExitStoppedWithPeers;
      if (orderly) outcome.stopped_at_boundary = true;
      if (e.code != 0 && !orderly && outcome.exit_code == 0 && !stopping) {
        outcome.exit_code = e.code;
        outcome.failed_rank = e.id;
        outcome.failed_at = outcome.last_alive = std::chrono::steady_clock::now();
        outcome.cause = e.describe();
        spdlog::error("{}; stopping the others", outcome.cause);
      }
    }
    // An elastic job does not wait out --timeout for a worker that was stopped:
    // after the heartbeat timeout it is lost, and the cause names it.
    if (!c.elastic_inputs.empty() && outcome.exit_code == 0 && !stopping) {
      const auto now = std::chrono::steady_clock::now();
      for (const auto& [id, since] : workers.stopped()) {
        if (now - since < std::chrono::duration<double>(c.heartbeat_timeout_seconds)) continue;
        outcome.exit_code = 128 + SIGKILL;
        outcome.failed_rank = id;
        outcome.failed_at = now;
        outcome.last_alive = since;
        outcome.cause = fmt::format("rank {} stopped (state T) for {:.1f} s", id, c.heartbeat_timeout_seconds);
        spdlog::error("{}; stopping the others", outcome.cause);
        break;
      }
    }
    if (workers.active() == 0) break;
    if (on_tick) on_tick();
    if (!stopping && (outcome.exit_code != 0 || signals.received() != 0)) {
      if (signals.received() != 0 && outcome.exit_code == 0) {
        spdlog::warn("signal {}: stopping the workers", signals.received());
        outcome.exit_code = 128 + signals.received();
        outcome.interrupted = true;
      }
      stopping = true;
      stop_time = std::chrono::steady_clock::now();
      // An elastic job restarts from its checkpoint: the others' state is of no use, stop them at once.
      workers.signal_all(!c.elastic_inputs.empty() && !outcome.interrupted ? SIGKILL : SIGTERM);
    }
    if (stopping && !killed &&
        std::chrono::steady_clock::now() - stop_time > std::chrono::duration<double>(c.grace_seconds)) {
      workers.signal_all(SIGKILL);
      killed = true;
    }
  }
  outcome.all_stopped_at = std::chrono::steady_clock::now();
  return outcome;
}

int run_launch(const LaunchCommand& c) {
  if (c.arguments.empty()) throw UsageError("give the worker's command after --, e.g. -- train --model DIR ...");
  std::vector<std::string> args = c.arguments;
  int world = c.nprocs;
  if (!c.plan.empty()) {
    JobSpec spec;
    const Plan plan = load_plan(c.plan, spec);
    if (world == 0) world = plan.gpus();
    if (world != plan.gpus())
      throw UsageError(fmt::format("--nprocs {} but the plan needs {} ranks", world, plan.gpus()));
    args.push_back("--plan");
    args.push_back(c.plan.string());
  }
  if (world < 1) throw UsageError("give --nprocs (at least 1) or a --plan");
  if (world > 1024) throw UsageError("--nprocs above 1024 is not a job for one machine");
  const int port = c.master_port > 0 ? c.master_port : free_local_port();
  spdlog::info("launching {} worker(s), rendezvous at 127.0.0.1:{}", world, port);
  return run_workers(c, args, world, port).exit_code;
}

}  // namespace fleet::sailor::runtime
