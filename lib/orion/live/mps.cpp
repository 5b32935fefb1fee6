#include "orion/live/mps.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/error.h"

namespace fleet::orion::live {
namespace {

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return {};
}

// Runs the control program with our variables, `input` on its stdin.
int run_control(const std::string& program, const MpsEnvironment& mps, const char* argument, const char* input) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[0], 0);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    for (const auto& [name, value] : mps.variables) setenv(name.c_str(), value.c_str(), 1);
    if (argument != nullptr)
      execl(program.c_str(), program.c_str(), argument, static_cast<char*>(nullptr));
    else
      execl(program.c_str(), program.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[0]);
  if (input != nullptr) {
    const std::string text = input;
    [[maybe_unused]] const ssize_t n = write(pipe_fds[1], text.data(), text.size());
  }
  close(pipe_fds[1]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

MpsEnvironment prepare_mps(bool start) {
  MpsEnvironment mps;
  const char* pipe_env = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  mps.pipe_directory = pipe_env != nullptr && *pipe_env != '\0' ? pipe_env : "/tmp/nvidia-mps";
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(mps.pipe_directory) / "control", ec)) {
    mps.running = true;
    return mps;
  }
  if (!start) {
    mps.notice = "CUDA MPS is not running (no " + mps.pipe_directory +
                 "/control): the GPU time-slices between processes, so kernels of different clients never run at "
                 "the same time; the policy still decides what each client may submit and when. --start-mps starts "
                 "a private MPS daemon for the commands.";
    return mps;
  }
  const std::string program = find_on_path("nvidia-cuda-mps-control");
  if (program.empty()) {
    throw InputError("--start-mps: nvidia-cuda-mps-control is not on PATH (it comes with the NVIDIA driver)");
  }
  char dir_template[] = "/tmp/orion-mps-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) throw RuntimeFailure("--start-mps: cannot create a folder in /tmp");
  mps.private_directory = dir_template;
  mps.pipe_directory = mps.private_directory + "/pipe";
  std::filesystem::create_directories(mps.pipe_directory);
  std::filesystem::create_directories(mps.private_directory + "/log");
  mps.variables = {{"CUDA_MPS_PIPE_DIRECTORY", mps.pipe_directory},
                   {"CUDA_MPS_LOG_DIRECTORY", mps.private_directory + "/log"}};
  if (run_control(program, mps, "-d", nullptr) != 0) {
    std::filesystem::remove_all(mps.private_directory, ec);
    throw RuntimeFailure("--start-mps: nvidia-cuda-mps-control -d failed");
  }
  for (int i = 0; i < 100 && !std::filesystem::exists(mps.pipe_directory + "/control", ec); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  mps.running = std::filesystem::exists(mps.pipe_directory + "/control", ec);
  mps.started_by_us = true;
  if (!mps.running) {
    // Stop whatever did start, but keep the folder: its log says why.
    run_control(program, mps, nullptr, "quit\n");
    mps.started_by_us = false;
    throw RuntimeFailure("--start-mps: the MPS daemon did not come up (see its log in " + mps.private_directory +
                         "/log)");
  }
  return mps;
}

void stop_mps(MpsEnvironment& mps) {
  if (!mps.started_by_us) return;
  const std::string program = find_on_path("nvidia-cuda-mps-control");
  if (!program.empty()) run_control(program, mps, nullptr, "quit\n");
  std::error_code ec;
  std::filesystem::remove_all(mps.private_directory, ec);
  mps.started_by_us = false;
  mps.running = false;
}

}  // namespace fleet::orion::live
