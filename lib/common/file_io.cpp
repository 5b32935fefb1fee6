#include "common/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <mutex>
#include <utility>

#include "common/error.h"

namespace fleet {

namespace {

// Closes a descriptor when the scope ends.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

int open_regular_file(const std::filesystem::path& path, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw InputError(err == ENOENT ? std::string("no such file") : errno_message("cannot open", err),
                     {path.string(), "", std::nullopt});
  }
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    throw InputError(errno_message("cannot stat", err), {path.string(), "", std::nullopt});
  }
  if (S_ISDIR(st->st_mode)) {
    ::close(fd);
    throw InputError("is a folder, expected a file", {path.string(), "", std::nullopt});
  }
  // A device (/dev/zero, /dev/urandom) never ends: reading one whole would
  // fill memory. Pipes stay allowed ("-", /dev/stdin, process substitution).
  if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) {
    ::close(fd);
    throw InputError("is a device, expected a file or a pipe", {path.string(), "", std::nullopt});
  }
  return fd;
}

// `known_size`: the input's size when known (a file). Sizes in whole MiB; one
// that rounds down to the cap is "more than" it.
[[noreturn]] void refuse_size(const std::filesystem::path& path, std::optional<std::uintmax_t> known_size,
                              std::uintmax_t max_bytes) {
  const std::uintmax_t cap_mib = max_bytes >> 20;
  const std::string size = known_size && (*known_size >> 20) > cap_mib
                               ? std::to_string(*known_size >> 20) + " MiB"
                               : "more than " + std::to_string(cap_mib) + " MiB";
  const std::string name = is_stdio(path) ? std::string("standard input") : path.string();
  throw InputError(name + " is " + size + "; at most " + std::to_string(cap_mib) + " MiB is accepted for this input");
}

// Reads everything from `fd` into `out` (sized as a first guess), refusing
// more than `max_bytes`.
void read_all(int fd, const std::filesystem::path& path, std::string& out, std::uintmax_t max_bytes) {
  std::size_t done = 0;
  for (;;) {
    if (done > max_bytes) refuse_size(path, std::nullopt, max_bytes);
    if (done == out.size()) out.resize(out.size() + 65536);  // file grew or is a pipe
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InputError(errno_message("cannot read", errno), {path.string(), "", std::nullopt});
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
}

}  // namespace

void check_input_file(const std::filesystem::path& path) {
  if (is_stdio(path)) return;
  struct stat st {};
  FdGuard guard{open_regular_file(path, &st)};
}

std::string read_file(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  if (is_stdio(path)) {
    // Standard input can be read once; a second reader gets the same text.
    static std::mutex mutex;
    static std::string stdin_text;
    static bool stdin_read = false;
    const std::lock_guard<std::mutex> lock(mutex);
    if (!stdin_read) {
      read_all(STDIN_FILENO, kStdioPath, stdin_text, max_bytes);
      stdin_read = true;
    }
    if (stdin_text.size() > max_bytes) refuse_size(kStdioPath, stdin_text.size(), max_bytes);
    return stdin_text;
  }
  struct stat st {};
  FdGuard guard{open_regular_file(path, &st)};
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  if (size > max_bytes) refuse_size(path, size, max_bytes);
  std::string out;
  out.resize(static_cast<std::size_t>(size));
  read_all(guard.fd, path, out, max_bytes);
  return out;
}

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  if (is_stdio(path)) throw InputError("standard input cannot be used here; give a file", {"-", "", std::nullopt});
  struct stat st {};
  FdGuard guard{open_regular_file(path, &st)};
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (p == MAP_FAILED) {
    size_ = 0;
    throw IoError(errno_message("cannot mmap", errno), {path.string(), "", std::nullopt});
  }
  data_ = static_cast<const std::byte*>(p);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace fleet
