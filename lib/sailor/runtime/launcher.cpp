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

#include <fmt/format.h>

#include "common/error.h"
#include "common/logging.h"
#include "sailor/plan.h"
#include "sailor/runtime/elastic.h"

namespace fleet::sailor::runtime {
namespace {

std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal = sig; }

// One worker: its pid and the pipes its stdout and stderr come through.
struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;
  std::string out_tail, err_tail;  // a line not yet complete
  bool exited = false;
  int status = 0;
};

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Reads what is there and writes complete lines, each prefixed with the rank
// when `prefix` (so lines of different workers never interleave mid-line).
// Returns false at end of file.
bool pump(int& fd, std::string& tail, int rank, int to, bool prefix) {
  char buffer[65536];
  ssize_t n = ::read(fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!tail.empty()) write_all(to, (prefix ? fmt::format("[rank {}] ", rank) : "") + tail + "\n");
    tail.clear();
    ::close(fd);
    fd = -1;
    return false;
  }
  tail.append(buffer, static_cast<std::size_t>(n));
  std::size_t start = 0, end;
  std::string lines;
  while ((end = tail.find('\n', start)) != std::string::npos) {
    if (prefix) lines += fmt::format("[rank {}] ", rank);
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

[[noreturn]] void exec_worker(const LaunchCommand& c, const std::vector<std::string>& args, int rank, int world,
                              int port, int out, int err) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans if the launcher dies
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  if (!c.elastic_inputs.empty()) ::setenv(kEnvElastic, "1", 1);
  std::vector<char*> argv;
  const std::string program = c.program.empty() ? "/proc/self/exe" : c.program.string();
  std::string name = "sailor-run";
  argv.push_back(name.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  std::string msg = fmt::format("sailor-run: error: cannot start worker {}: {}\n", rank, std::strerror(errno));
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

WorkerOutcome run_workers(const LaunchCommand& c, const std::vector<std::string>& args, int world, int port,
                          const std::function<void()>& on_tick) {
  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {}, old_term {};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);

  std::vector<Worker> workers(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw IoError(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0) throw IoError(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) exec_worker(c, args, r, world, port, out[1], err[1]);
    ::close(out[1]);
    ::close(err[1]);
    auto& w = workers[static_cast<std::size_t>(r)];
    w.rank = r;
    w.pid = pid;
    w.out = out[0];
    w.err = err[0];
  }

  WorkerOutcome outcome;
  bool stopping = false;
  auto stop_time = std::chrono::steady_clock::now();
  bool killed = false;
  auto stop_all = [&](int sig) {
    for (auto& w : workers)
      if (!w.exited) ::kill(w.pid, sig);
  };
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& w : workers) {
      if (w.out >= 0) fds.push_back({w.out, POLLIN, 0});
      if (w.err >= 0) fds.push_back({w.err, POLLIN, 0});
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    for (auto& w : workers) {
      for (const auto& p : fds) {
        if (p.revents == 0) continue;
        if (p.fd == w.out && w.out >= 0) pump(w.out, w.out_tail, w.rank, STDOUT_FILENO, false);
        if (p.fd == w.err && w.err >= 0) pump(w.err, w.err_tail, w.rank, STDERR_FILENO, true);
      }
    }
    bool all_done = true;
    for (auto& w : workers) {
      if (!w.exited) {
        int status = 0;
        if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
          w.exited = true;
          w.status = status;
          const int code = exit_code_of(status);
          if (code == kExitPreempted) outcome.left_ranks.push_back(w.rank);
          // Leaving at a step boundary is orderly: the others stop at the same one by themselves.
          const bool orderly = code == kExitPreempted || code == kExitStoppedWithPeers;
          if (orderly) outcome.stopped_at_boundary = true;
          if (code != 0 && !orderly && outcome.exit_code == 0 && !stopping) {
            outcome.exit_code = code;
            outcome.failed_rank = w.rank;
            outcome.failed_at = std::chrono::steady_clock::now();
            outcome.cause = WIFSIGNALED(status) ? fmt::format("worker {} killed by signal {}", w.rank, WTERMSIG(status))
                                                : fmt::format("worker {} exited with status {}", w.rank, code);
            spdlog::error("{}; stopping the others", outcome.cause);
          }
        }
      }
      all_done = all_done && w.exited && w.out < 0 && w.err < 0;
    }
    if (all_done) break;
    if (on_tick) on_tick();
    if (!stopping && (outcome.exit_code != 0 || g_signal != 0)) {
      if (g_signal != 0 && outcome.exit_code == 0) {
        spdlog::warn("signal {}: stopping the workers", g_signal.load());
        outcome.exit_code = 128 + g_signal;
        outcome.interrupted = true;
      }
      stopping = true;
      stop_time = std::chrono::steady_clock::now();
      // An elastic job restarts from its checkpoint: the others' state is of no use, stop them at once.
      stop_all(!c.elastic_inputs.empty() && !outcome.interrupted ? SIGKILL : SIGTERM);
    }
    if (stopping && !killed &&
        std::chrono::steady_clock::now() - stop_time > std::chrono::duration<double>(c.grace_seconds)) {
      stop_all(SIGKILL);
      killed = true;
    }
    // A worker whose pipes closed but which has exited is reaped above; one
    // that still runs with closed pipes is waited for without busy polling.
    if (fds.empty()) ::usleep(50000);
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  outcome.all_stopped_at = std::chrono::steady_clock::now();
  return outcome;
}

int run_launch(const LaunchCommand& c) {
  if (c.arguments.empty()) throw UsageError("give the worker's command after --, e.g. -- train --model DIR ...");
  if (!c.elastic_inputs.empty()) return run_elastic_launch(c);
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
