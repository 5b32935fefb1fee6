// The rules for outputs, one test per rule: never replace what is not a
// regular file or folder, one meaning for "out/", one writer per output,
// helper names that fit wherever the output's name fits, and temporaries
// removed on every way out (an error, a signal, a killed earlier run).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/output_check.h"
#include "common/output_claim.h"
#include "common/output_path.h"
#include "common/signal_cleanup.h"
#include "test_util.h"

namespace fleet {
namespace {

namespace fs = std::filesystem;

// Runs `child` in a forked process and returns its wait status.
int in_child(const std::function<int()>& child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = child();
    } catch (...) {
      code = 98;
    }
    release_output_claims();  // what exit() does in a program
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(OutputRules, TrailingSlashesNameTheFolderItself) {
  EXPECT_EQ(normalize_output_path("o6/"), fs::path("o6"));
  EXPECT_EQ(normalize_output_path("a/o6//"), fs::path("a/o6"));
  EXPECT_EQ(normalize_output_path("o6/."), fs::path("o6"));
  EXPECT_EQ(normalize_output_path("/"), fs::path("/"));
  EXPECT_EQ(normalize_output_path("-"), fs::path("-"));
  EXPECT_EQ(normalize_output_path("plain.json"), fs::path("plain.json"));
}

TEST(OutputRules, StandardOutputNamesAreDescriptors) {
  for (const char* name : {"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) {
    const OutputTarget t = resolve_output(name);
    EXPECT_EQ(t.kind, OutputKind::kDescriptor) << name;
    EXPECT_TRUE(t.is_stdout()) << name;
  }
  EXPECT_EQ(resolve_output("/dev/stderr").descriptor, 2);
  // A descriptor that is not open is refused, not created as a file.
  EXPECT_NE(testing::error_of<UsageError>([] { resolve_output("/dev/fd/987"); }).find("not open"), std::string::npos);
}

TEST(OutputRules, DevicesAndFifosAreWrittenIntoNeverReplaced) {
  testing::TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = read_file(dir / "fifo"); });
  write_file_atomically(dir / "fifo", "through the pipe\n");
  reader.join();
  EXPECT_EQ(received, "through the pipe\n");
  struct stat st {};
  ASSERT_EQ(::lstat((dir / "fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";

  write_file_atomically("/dev/null", "discarded");
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A device that refuses the data: an error, as for any failed write.
  EXPECT_NE(testing::error_of<IoError>([] { write_file_atomically("/dev/full", "x"); }).find("No space left"),
            std::string::npos);
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"fifo"});
}

TEST(OutputRules, SocketsAndDanglingLinksAreRefused) {
  testing::TempDir dir;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socket_path = (dir / "sock").string();
  ASSERT_LT(socket_path.size(), sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_NE(testing::error_of<UsageError>([&] { write_file_atomically(dir / "sock", "x"); }).find("socket"),
            std::string::npos);
  ::close(fd);
  fs::create_symlink(dir / "missing" / "target", dir / "dangling");
  EXPECT_NE(testing::error_of<UsageError>([&] { write_file_atomically(dir / "dangling", "x"); }).find("does not exist"),
            std::string::npos);
  fs::create_symlink(dir / "loop", dir / "loop");
  EXPECT_NE(testing::error_of<UsageError>([&] { write_file_atomically(dir / "loop", "x"); }).find("loop"),
            std::string::npos);
}

TEST(OutputRules, ALinkIsFollowedAndStays) {
  testing::TempDir dir;
  fs::create_directory(dir / "real");
  write_file_atomically(dir / "real" / "plan.json", "old");
  fs::create_symlink("real/plan.json", dir / "link.json");
  write_file_atomically(dir / "link.json", "new");
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(read_file(dir / "real" / "plan.json"), "new");
  // A folder through a link: the link stays, the folder behind it is replaced.
  fs::create_directory(dir / "model");
  write_file_atomically(dir / "model" / "old.txt", "x");
  fs::create_directory_symlink("model", dir / "model-link");
  write_directory_atomically(dir / "model-link/", [](const fs::path& d) { write_file_atomically(d / "new.txt", "y"); });
  EXPECT_TRUE(fs::is_symlink(dir / "model-link"));
  EXPECT_EQ(testing::list_dir(dir / "model"), std::vector<std::string>{"new.txt"});
}

TEST(OutputRules, AFolderNamedWithASlashIsReplacedAsAWhole) {
  testing::TempDir dir;
  fs::create_directory(dir / "o6");
  write_file_atomically(dir / "o6" / "stale.txt", "x");
  write_directory_atomically((dir / "o6").string() + "/",
                             [](const fs::path& d) { write_file_atomically(d / "config.json", "{}"); });
  EXPECT_EQ(testing::list_dir(dir / "o6"), std::vector<std::string>{"config.json"});
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"o6"});
}

TEST(OutputRules, HelperNamesFitWhereverTheOutputsNameFits) {
  testing::TempDir dir;
  const std::size_t name_max = max_name_length(dir.path());
  for (std::size_t length : {std::size_t{200}, std::size_t{240}, name_max}) {
    const std::string name(length, 'n');
    const fs::path target = dir / name;
    EXPECT_LE(helper_stem(target).size() + 40, std::size_t{NAME_MAX}) << length;
    write_file_atomically(target, "long name");
    EXPECT_EQ(read_file(target), "long name");
    write_directory_atomically(dir / (name.substr(0, length - 1) + "d"),
                               [](const fs::path& d) { write_file_atomically(d / "f", "x"); });
    OutputCheck().file(target, "-o").check(Existing::kReplace);  // claims it: the lock file's name fits too
    release_output_claims();
  }
  // Two long names that share their start get different helper names.
  EXPECT_NE(helper_stem(dir / (std::string(250, 'a') + "1")), helper_stem(dir / (std::string(250, 'a') + "2")));
  // A name the folder cannot hold is refused before any work.
  const std::string too_long(name_max + 1, 'x');
  EXPECT_NE(testing::error_of<UsageError>([&] {
              OutputCheck().file(dir / too_long, "-o").check(Existing::kReplace);
            }).find("at most"),
            std::string::npos);
  EXPECT_EQ(testing::list_dir(dir.path()).size(), 6u);  // the three outputs and three folders, nothing else
}

TEST(OutputRules, OneWriterPerOutput) {
  testing::TempDir dir;
  const fs::path out = dir / "run";
  OutputCheck().folder(out, "-o").check(Existing::kNeedsForce);
  OutputCheck().folder(out, "-o").check(Existing::kNeedsForce);  // the same process again: fine
  // Another process is refused, naming the option and this process.
  const int status = in_child([&] {
    const std::string message =
        testing::error_of<UsageError>([&] { OutputCheck().folder(out, "-o").check(Existing::kNeedsForce); });
    const bool names_holder =
        message.find("-o") != std::string::npos && message.find(std::to_string(::getppid())) != std::string::npos;
    // A command that only checks, without claiming, is not refused.
    OutputCheck().folder(out, "-o").without_claim().check(Existing::kNeedsForce);
    return names_holder ? 0 : 1;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{".run.lock"});
  release_output_claims();
  EXPECT_TRUE(testing::list_dir(dir.path()).empty()) << "the lock file stays after the release";
  // Released: another process may claim it now.
  const int after = in_child([&] {
    OutputCheck().folder(out, "-o").check(Existing::kNeedsForce);
    return 0;
  });
  EXPECT_EQ(WEXITSTATUS(after), 0);
  EXPECT_TRUE(testing::list_dir(dir.path()).empty()) << "the child's lock file stays after it exited";
}

TEST(OutputRules, TheFirstClaimRemovesWhatAKilledRunLeft) {
  testing::TempDir dir;
  write_file_atomically(dir / ".k.h5.tmp-AbC123", "half a file");
  fs::create_directory(dir / ".run.tmp-0123abcd-50");
  write_file_atomically(dir / ".run.tmp-0123abcd-50" / "model.safetensors", "half a checkpoint");
  write_file_atomically(dir / ".k.h5.tmp-x.tmp-AbC123", "another output's temporary");  // of "k.h5.tmp-x"
  write_file_atomically(dir / ".other.tmp-AbC123", "another output's temporary");
  OutputCheck().file(dir / "k.h5", "-o").folder(dir / "run", "--out2").check(Existing::kReplace);
  release_output_claims();
  EXPECT_EQ(testing::list_dir(dir.path()), (std::vector<std::string>{".k.h5.tmp-x.tmp-AbC123", ".other.tmp-AbC123"}));
}

TEST(OutputRules, ASignalRemovesTemporaries) {
  testing::TempDir dir, tmp;
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP}) {
    const int status = in_child([&] {
      ::setenv("TMPDIR", tmp.path().c_str(), 1);  // where a standard output's temporary goes
      install_cleanup_on_signal();
      OutputCheck().file(dir / "k.h5", "-o").check(Existing::kReplace);
      AtomicFileWriter file(dir / "k.h5");
      file.write(std::string(1 << 20, 'x'));
      AtomicFileWriter stream("-");
      stream.write("never sent");
      write_directory_atomically(dir / "model", [&](const fs::path& d) {
        write_file_atomically(d / "config.json", "{}");
        fs::create_directories(d / "nested" / "deeper");
        write_file_atomically(d / "nested" / "deeper" / "w.bin", std::string(4096, 'w'));
        ::raise(signal_number);
      });
      return 0;  // not reached
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << signal_number;
    EXPECT_EQ(WTERMSIG(status), signal_number);
    EXPECT_TRUE(testing::list_dir(dir.path()).empty())
        << "signal " << signal_number << " left " << testing::list_dir(dir.path()).front();
    EXPECT_TRUE(testing::list_dir(tmp.path()).empty())
        << "signal " << signal_number << " left " << testing::list_dir(tmp.path()).front();
  }
}

TEST(OutputRules, StreamOutputsAreCountedAsStandardOutput) {
  EXPECT_TRUE(OutputCheck().file("/dev/stdout", "-o").writes_stdout());
  EXPECT_FALSE(OutputCheck().file("/dev/null", "-o").writes_stdout());
  EXPECT_NE(testing::error_of<UsageError>([] {
              OutputCheck().file("-", "-o").file("/dev/stdout", "--json").check(Existing::kReplace);
            }).find("only one output"),
            std::string::npos);
  // A stream needs no --force: nothing is replaced.
  OutputCheck().file("/dev/null", "-o").check(Existing::kNeedsForce);
  EXPECT_NE(testing::error_of<UsageError>([] {
              OutputCheck().folder("/dev/null", "-o").check(Existing::kReplace);
            }).find("not a folder"),
            std::string::npos);
}

}  // namespace
}  // namespace fleet
