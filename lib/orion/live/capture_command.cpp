#include "orion/live/capture_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>

#include "common/error.h"
#include "common/helper_library.h"
#include "common/output_check.h"
#include "common/temporary_folder.h"
#include "orion/kernel_profile.h"

namespace fleet::orion::live {
namespace {

std::filesystem::path capture_library() {
  return helper_library("liborion_capture.so", "ORION_CAPTURE_LIBRARY",
                        "it is built when the CUDA toolkit with CUPTI is found");
}

int run_program(const std::vector<std::string>& command, const std::filesystem::path& library,
                const std::filesystem::path& records) {
  const pid_t pid = fork();
  if (pid < 0) throw RuntimeFailure(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setenv("CUDA_INJECTION64_PATH", library.c_str(), 1);
    setenv("ORION_CAPTURE_OUT", records.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "orion-profile capture: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

int run_capture(const CaptureCommandOptions& o) {
  if (o.from_records.has_value() == !o.command.empty()) {
    throw InputError("give either a program to run after '--' or --from-records FILE");
  }
  OutputCheck check;
  if (o.from_records) check.input(*o.from_records, "--from-records");
  if (o.conversion.ncu) check.input(*o.conversion.ncu, "--ncu");
  check.file(o.output, "-o");
  if (o.keep_records) check.file(*o.keep_records, "--keep-records");
  check.check(Existing::kReplace);
  if (o.conversion.ncu && !std::filesystem::exists(*o.conversion.ncu)) {
    throw InputError(o.conversion.ncu->string() + ": no such file");
  }

  std::filesystem::path records;
  std::optional<TemporaryFolder> scratch;  // the records when not kept, removed on every way out
  if (o.from_records) {
    records = *o.from_records;
  } else {
    const std::filesystem::path library = capture_library();
    if (o.keep_records) {
      records = *o.keep_records;
    } else {
      scratch.emplace("orion-capture");
      records = scratch->path() / "records.jsonl";
    }
    std::filesystem::remove(records);
    const int code = run_program(o.command, library, records);
    if (code != 0) throw RuntimeFailure("the captured program exited with status " + std::to_string(code));
    if (!std::filesystem::exists(records)) {
      throw RuntimeFailure(
          "the program left no kernel records: it never initialised CUDA, or CUPTI could not "
          "attach (another profiler running, or a driver without CUPTI support)");
    }
  }
  const CaptureRecords parsed = read_capture_records(records);
  std::string summary;
  KernelProfile profile = profile_from_capture(parsed, o.conversion, &summary);
  write_kernel_profile(o.output, profile);
  std::cerr << "orion-profile capture: " << summary << "\nwrote " << o.output.string() << "\n";
  return 0;
}

}  // namespace fleet::orion::live
