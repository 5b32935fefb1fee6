#include "orion/live/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>

namespace fleet::orion::live {

namespace {

std::runtime_error system_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

void* map_file(int fd) {
  void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

Segment Segment::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw system_error("cannot create the scheduler segment", path);
  if (ftruncate(fd, static_cast<off_t>(kSegmentBytes)) != 0) {
    const int saved = errno;
    ::close(fd);
    ::unlink(path.c_str());
    errno = saved;
    throw system_error("cannot size the scheduler segment", path);
  }
  void* p = map_file(fd);
  const int saved = errno;
  ::close(fd);
  if (p == nullptr) {
    ::unlink(path.c_str());
    errno = saved;
    throw system_error("cannot map the scheduler segment", path);
  }
  Segment s;
  s.header_ = new (p) SegmentHeader();  // the file is zero-filled; construct the atomics properly
  s.header_->magic = kSegmentMagic;
  s.header_->version = kSegmentVersion;
  s.path_ = path;
  s.owner_ = true;
  s.mapped_ = true;
  return s;
}

Segment Segment::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw system_error("cannot open the scheduler segment", path);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < kSegmentBytes) {
    ::close(fd);
    throw std::runtime_error("scheduler segment " + path + " is too small (another version of orion-run?)");
  }
  void* p = map_file(fd);
  ::close(fd);
  if (p == nullptr) throw system_error("cannot map the scheduler segment", path);
  auto* header = static_cast<SegmentHeader*>(p);
  if (header->magic != kSegmentMagic || header->version != kSegmentVersion) {
    munmap(p, kSegmentBytes);
    throw std::runtime_error("scheduler segment " + path + " has another format version");
  }
  Segment s;
  s.header_ = header;
  s.path_ = path;
  s.mapped_ = true;
  return s;
}

Segment Segment::in_memory() {
  Segment s;
  s.header_ = new SegmentHeader();
  s.header_->magic = kSegmentMagic;
  s.header_->version = kSegmentVersion;
  return s;
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    this->~Segment();
    header_ = other.header_;
    path_ = std::move(other.path_);
    owner_ = other.owner_;
    mapped_ = other.mapped_;
    other.header_ = nullptr;
    other.owner_ = false;
  }
  return *this;
}

Segment::~Segment() {
  if (header_ == nullptr) return;
  if (mapped_) {
    munmap(header_, kSegmentBytes);
    if (owner_) ::unlink(path_.c_str());
  } else {
    delete header_;
  }
  header_ = nullptr;
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::int64_t timeout_ns) {
  struct timespec ts {};
  ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000);
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

std::int64_t monotonic_ns() {
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool process_alive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie still answers kill(); its state in /proc says it is gone.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;  // no /proc: trust kill()
  char buffer[512] = {};
  const std::size_t n = std::fread(buffer, 1, sizeof buffer - 1, f);
  std::fclose(f);
  const char* close_paren = std::strrchr(buffer, ')');  // the name may contain spaces and parentheses
  if (n == 0 || close_paren == nullptr || close_paren[1] == '\0') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

void reset_slot(ClientSlot& slot) {
  for (LaunchEntry& e : slot.ring) {
    e.state.store(kFree, std::memory_order_relaxed);
    e.ticket = 0;
  }
  slot.next_ticket.store(0, std::memory_order_relaxed);
  slot.name_count.store(0, std::memory_order_relaxed);
  slot.pid.store(0, std::memory_order_relaxed);
  slot.client = -1;
  slot.exited.store(0, std::memory_order_relaxed);
  slot.generation.fetch_add(1, std::memory_order_relaxed);
  slot.state.store(kSlotFree, std::memory_order_release);
}

}  // namespace fleet::orion::live
