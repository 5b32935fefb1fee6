#include "common/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdio.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <string>
#include <memory>
#include <vector>

#include "common/error.h"
#include "common/file_io.h"

namespace fleet {

namespace {

ErrorContext context_for(const std::filesystem::path& path) { return {path.string(), "", std::nullopt}; }

// The process umask, read without changing it for longer than an instant.
mode_t current_umask() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

// Writes all of `size` bytes to `fd`, retrying short writes; IoError otherwise.
void write_fully(int fd, const void* data, std::size_t size, const std::filesystem::path& target) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(errno_message("cannot write", errno), context_for(target));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // some filesystems refuse; the rename itself already happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

namespace {

// Temporaries of outputs that are streams live in TMPDIR, named after the
// process that made them, so that one left by a process killed with SIGKILL
// (which no handler sees) is removed by the next command that makes one.
constexpr const char* kStreamTemporaryPrefix = "gpufleet-output-";

void remove_temporaries_of_dead_processes(const std::filesystem::path& dir) {
  std::error_code ec;
  const std::string prefix = kStreamTemporaryPrefix;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + prefix.size()));
    if (pid <= 0 || pid == ::getpid()) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) ::unlink(it->path().c_str());
  }
}

// A named temporary file in TMPDIR for an output that is a stream; returns its descriptor.
int stream_temporary_file(const std::filesystem::path& target, std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  remove_temporaries_of_dead_processes(dir);
  std::string pattern = (dir / (kStreamTemporaryPrefix + std::to_string(::getpid()) + ".tmp-XXXXXX")).string();
  const int fd = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (fd < 0)
    throw IoError(errno_message("cannot create a temporary file in " + dir.string() + " (set TMPDIR)", errno),
                  context_for(target));
  path = pattern;
  return fd;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path target)
    : target_(normalize_output_path(target)), resolved_(resolve_output(target_)) {
  if (resolved_.kind != OutputKind::kReplace) {
    fd_ = stream_temporary_file(target_, temp_path_);
    temp_removal_ = RemoveOnSignal(temp_path_);
    return;
  }
  if (resolved_.is_folder) throw UsageError("is a folder, cannot write a file there", context_for(target_));
  const std::filesystem::path& real = resolved_.path;
  const std::filesystem::path dir = real.parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
    throw UsageError("output folder does not exist", context_for(target_));
  const std::size_t name_max = max_name_length(dir);
  if (real.filename().string().size() > name_max)
    throw UsageError("the file name is " + std::to_string(real.filename().string().size()) +
                         " bytes long; the folder accepts at most " + std::to_string(name_max),
                     context_for(target_));
  std::string pattern = (dir / (temporary_prefix(real) + "XXXXXX")).string();
  fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (fd_ < 0) throw IoError(errno_message("cannot create a temporary file", errno), context_for(target_));
  temp_path_ = pattern;
  temp_removal_ = RemoveOnSignal(temp_path_);
  // mkstemp makes 0600; give the result the permissions a plain create would.
  ::fchmod(fd_, 0666 & ~current_umask());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_removal_.release();
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) throw IoError("internal: write after close", context_for(target_));
  write_fully(fd_, bytes.data(), bytes.size(), target_);
}

void AtomicFileWriter::copy_to_stream() {
  std::cout.flush();  // keep the order of anything the program printed before
  int out = resolved_.descriptor;
  bool opened = false;
  if (resolved_.kind == OutputKind::kStream) {
    // No O_CREAT, no O_TRUNC: the FIFO or device is written into, never made or replaced.
    out = ::open(resolved_.path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (out < 0) throw IoError(errno_message("cannot open", errno), context_for(target_));
    opened = true;
  }
  try {
    if (::lseek(fd_, 0, SEEK_SET) < 0) throw IoError(errno_message("cannot rewind", errno), context_for(target_));
    std::vector<char> buffer(1 << 16);
    for (;;) {
      const ssize_t n = ::read(fd_, buffer.data(), buffer.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        throw IoError(errno_message("cannot read back", errno), context_for(target_));
      }
      if (n == 0) break;
      write_fully(out, buffer.data(), static_cast<std::size_t>(n), target_);
    }
  } catch (...) {
    if (opened) ::close(out);
    throw;
  }
  if (opened && ::close(out) != 0) throw IoError(errno_message("cannot write", errno), context_for(target_));
}

void AtomicFileWriter::write(std::string_view text) {
  write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void AtomicFileWriter::close_fd() {
  if (fd_ >= 0 && ::close(fd_) != 0) {
    fd_ = -1;
    throw IoError(errno_message("cannot close", errno), context_for(target_));
  }
  fd_ = -1;
}

void AtomicFileWriter::commit() {
  if (committed_) return;
  if (fd_ < 0) {
    // Someone else wrote the file by name; reopen it to flush it to disk.
    fd_ = ::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);  // read-only suffices for fsync
    if (fd_ < 0) throw IoError(errno_message("cannot reopen temporary file", errno), context_for(target_));
  }
  if (resolved_.kind != OutputKind::kReplace) {
    copy_to_stream();
    discard();
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0) throw IoError(errno_message("cannot write", errno), context_for(target_));
  close_fd();
  if (::rename(temp_path_.c_str(), resolved_.path.c_str()) != 0) {
    throw IoError(errno_message("cannot rename the temporary file into place", errno), context_for(target_));
  }
  committed_ = true;
  temp_removal_.release();
  fsync_directory(resolved_.path.parent_path());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter writer(path);
  writer.write(contents);
  writer.commit();
}

void write_files_atomically(const std::vector<std::pair<std::filesystem::path, std::string>>& files) {
  // Every temporary file is complete before the first rename, so an error
  // while writing leaves all targets as they were.
  std::vector<std::unique_ptr<AtomicFileWriter>> writers;
  for (const auto& [path, contents] : files) {
    writers.push_back(std::make_unique<AtomicFileWriter>(path));
    writers.back()->write(contents);
  }
  for (auto& writer : writers) writer->commit();
}

void write_file_atomically(const std::filesystem::path& path, const std::function<void(AtomicFileWriter&)>& fill) {
  AtomicFileWriter writer(path);
  fill(writer);
  writer.commit();
}

}  // namespace fleet

namespace fleet {

namespace {

// The real folder an output folder name stands for (normalised, links
// followed); UsageError when it is something other than a folder or a new name.
std::filesystem::path real_output_folder(const std::filesystem::path& target) {
  const OutputTarget resolved = resolve_output(target);
  if (resolved.kind != OutputKind::kReplace || (resolved.exists && !resolved.is_folder))
    throw UsageError("exists and is not a folder", context_for(resolved.given));
  return resolved.path;
}

}  // namespace

void commit_directory_atomically(const std::filesystem::path& staging, const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const fs::path real = real_output_folder(target);
  const fs::path parent = real.parent_path().empty() ? fs::path(".") : real.parent_path();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(staging)) {
    if (!entry.is_regular_file()) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  fsync_directory(staging);
  if (fs::exists(real)) {
    // One atomic exchange: readers see either the old folder or the new one.
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, real.c_str(), RENAME_EXCHANGE) != 0)
      throw IoError(std::string("cannot replace the folder: ") + std::strerror(errno), context_for(target));
    fsync_directory(parent);
    fs::remove_all(staging, ec);  // now holds the previous contents
  } else {
    if (::rename(staging.c_str(), real.c_str()) != 0)
      throw IoError(std::string("cannot create the folder: ") + std::strerror(errno), context_for(target));
    fsync_directory(parent);
  }
}

void write_directory_atomically(const std::filesystem::path& target,
                                const std::function<void(const std::filesystem::path&)>& fill) {
  namespace fs = std::filesystem;
  const fs::path real = real_output_folder(target);
  const fs::path parent = real.parent_path().empty() ? fs::path(".") : real.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) throw UsageError("folder does not exist", context_for(parent));
  std::string pattern = (parent / (temporary_prefix(real) + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw IoError(std::string("cannot create a temporary folder: ") + std::strerror(errno), context_for(parent));
  const fs::path temp(pattern);
  RemoveOnSignal removal(temp);
  // mkdtemp makes 0700; give the folder the permissions a plain mkdir would.
  ::chmod(temp.c_str(), 0777 & ~current_umask());
  try {
    fill(temp);
    commit_directory_atomically(temp, real);
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
}

}  // namespace fleet
