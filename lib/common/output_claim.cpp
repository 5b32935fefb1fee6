#include "common/output_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/output_path.h"
#include "common/signal_cleanup.h"

namespace fleet {

namespace fs = std::filesystem;

namespace {

struct Claim {
  fs::path target;
  fs::path lock_file;
  int fd = -1;
  RemoveOnSignal removal;
};

// Every claim of the process. Released by the registry's destructor at exit,
// only in the process that made them (a forked child shares the descriptors
// but must not remove its parent's lock files).
class Claims {
 public:
  ~Claims() { release(); }

  std::mutex mutex;
  std::vector<Claim> held;
  pid_t owner = ::getpid();

  void release() noexcept {
    std::lock_guard lock(mutex);
    if (::getpid() != owner) return;
    for (Claim& claim : held) {
      claim.removal.release();
      ::unlink(claim.lock_file.c_str());  // while still locked: a waiting opener retries on the new file
      ::close(claim.fd);
    }
    held.clear();
  }
};

Claims& claims() {
  static Claims registry;
  return registry;
}

std::string holder_of(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  const std::string pid = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
  const auto end = pid.find_first_not_of("0123456789");
  return pid.substr(0, end);
}

}  // namespace

void claim_output(const fs::path& target) {
  Claims& registry = claims();
  std::lock_guard lock(registry.mutex);
  if (registry.owner != ::getpid()) {  // a forked child: its claims are its own
    registry.held.clear();
    registry.owner = ::getpid();
  }
  for (const Claim& claim : registry.held)
    if (claim.target == target) return;
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const fs::path lock_file = parent / (helper_stem(target) + ".lock");
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
      throw IoError(errno_message("cannot create the lock file " + lock_file.string(), errno),
                    ErrorContext{target.string(), "", std::nullopt});
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const std::string pid = holder_of(fd);
        ::close(fd);
        throw UsageError("is being written by another command" +
                             (pid.empty() ? std::string() : " (process " + pid + ")") +
                             "; wait for it to finish or choose another output",
                         ErrorContext{target.string(), "", std::nullopt});
      }
      ::close(fd);
      ::unlink(lock_file.c_str());
      spdlog::debug("{}: no file locks here ({}); writing it unclaimed", target.string(), errno_message("flock", err));
      return;
    }
    // The last holder may have removed the file between our open and our
    // lock: then we hold a lock on a name nobody sees. Try again.
    struct stat opened {
    }, named{};
    if (::fstat(fd, &opened) != 0 || ::stat(lock_file.c_str(), &named) != 0 || opened.st_ino != named.st_ino ||
        opened.st_dev != named.st_dev) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
    Claim claim{target, lock_file, fd, RemoveOnSignal(lock_file)};
    registry.held.push_back(std::move(claim));
    remove_stale_temporaries(target);
    return;
  }
  throw IoError("cannot lock " + lock_file.string() + ": it keeps being replaced",
                ErrorContext{target.string(), "", std::nullopt});
}

void release_output_claims() noexcept { claims().release(); }

}  // namespace fleet
