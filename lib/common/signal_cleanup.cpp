#include "common/signal_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace fleet {

namespace {

constexpr int kSlots = 256;
constexpr int kMaxDepth = 16;  // temporaries are shallow: model folders, checkpoint stagings

enum SlotState : int { kFree = 0, kWriting = 1, kArmed = 2 };

// A fixed table, so that the handler reads it without locks or allocation.
struct Slot {
  std::atomic<int> state{kFree};
  pid_t owner = 0;
  char path[PATH_MAX] = {};
};

Slot g_slots[kSlots];

// Removes the folder open as `dir` down to `depth` levels, then closes it.
// Only async-signal-safe calls: getdents64, unlinkat, openat, close.
void remove_folder_contents(int dir, int depth) {
  alignas(8) char buffer[4096];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir, buffer, sizeof buffer);
    if (n <= 0) break;
    bool removed_any = false;
    for (long off = 0; off < n;) {
      struct Entry {
        std::uint64_t ino;
        std::int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* entry = reinterpret_cast<const Entry*>(buffer + off);
      off += entry->reclen;
      const char* name = entry->name;
      if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
      bool is_dir = entry->type == DT_DIR;
      if (entry->type == DT_UNKNOWN) {
        struct stat st;
        is_dir = ::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      if (is_dir && depth > 0) {
        const int sub = ::openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) remove_folder_contents(sub, depth - 1);
      }
      if (::unlinkat(dir, name, is_dir ? AT_REMOVEDIR : 0) == 0) removed_any = true;
    }
    // Removing entries while reading can skip some: read again from the start.
    if (removed_any)
      ::lseek(dir, 0, SEEK_SET);
    else
      break;
  }
  ::close(dir);
}

void remove_path(const char* path) {
  struct stat st;
  if (::lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    const int dir = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir >= 0) remove_folder_contents(dir, kMaxDepth);
    ::rmdir(path);
  } else {
    ::unlink(path);
  }
}

extern "C" void remove_temporaries_and_reraise(int signal_number) {
  const int saved_errno = errno;
  const pid_t self = ::getpid();
  for (Slot& slot : g_slots) {
    if (slot.state.load(std::memory_order_acquire) == kArmed && slot.owner == self) remove_path(slot.path);
  }
  // End the process the way the signal would have.
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal_number, &action, nullptr);
  errno = saved_errno;
  ::raise(signal_number);
}

}  // namespace

void install_cleanup_on_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(signal_number, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      struct sigaction action {};
      action.sa_handler = remove_temporaries_and_reraise;
      sigemptyset(&action.sa_mask);
      // Block the other two while cleaning, so a second Ctrl-C does not cut it short.
      sigaddset(&action.sa_mask, SIGINT);
      sigaddset(&action.sa_mask, SIGTERM);
      sigaddset(&action.sa_mask, SIGHUP);
      ::sigaction(signal_number, &action, nullptr);
    }
  });
}

RemoveOnSignal::RemoveOnSignal(const std::filesystem::path& path) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(path, ec).string();
  if (ec || absolute.size() >= PATH_MAX) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) continue;
    std::memcpy(g_slots[i].path, absolute.c_str(), absolute.size() + 1);
    g_slots[i].owner = ::getpid();
    g_slots[i].state.store(kArmed, std::memory_order_release);
    slot_ = i;
    return;
  }
}

RemoveOnSignal::~RemoveOnSignal() { release(); }

RemoveOnSignal::RemoveOnSignal(RemoveOnSignal&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }

RemoveOnSignal& RemoveOnSignal::operator=(RemoveOnSignal&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

void RemoveOnSignal::release() noexcept {
  if (slot_ < 0) return;
  // Disarm before the slot can be reused, so the handler never reads a half-copied path.
  g_slots[slot_].state.store(kWriting, std::memory_order_release);
  g_slots[slot_].state.store(kFree, std::memory_order_release);
  slot_ = -1;
}

}  // namespace fleet
