#include "common/atomic_file.h"

#include <fcntl.h>
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

AtomicFileWriter::AtomicFileWriter(std::filesystem::path target) : target_(std::move(target)) {
  std::error_code ec;
  std::filesystem::path dir = target_.parent_path();
  std::string name = target_.filename().string();
  if (is_stdio(target_)) {
    // Standard output: collect the result in a private temporary file (some
    // libraries write only by name) and copy it out on commit, so a failed
    // command writes nothing to the pipe.
    dir = std::filesystem::temp_directory_path(ec);
    if (ec) dir = "/tmp";
    name = "gpufleet-stdout";
  } else {
    if (std::filesystem::is_directory(target_, ec)) {
      throw UsageError("is a folder, cannot write a file there", context_for(target_));
    }
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      throw UsageError("output folder does not exist", context_for(target_));
    }
  }
  std::string pattern = (dir / ("." + name + ".tmp-XXXXXX")).string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  fd_ = ::mkostemp(buffer.data(), O_CLOEXEC);
  if (fd_ < 0) throw IoError(errno_message("cannot create a temporary file", errno), context_for(target_));
  temp_path_ = buffer.data();
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
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) throw IoError("internal: write after close", context_for(target_));
  write_fully(fd_, bytes.data(), bytes.size(), target_);
}

void AtomicFileWriter::copy_to_stdout() {
  std::cout.flush();  // keep the order of anything the program printed before
  if (::lseek(fd_, 0, SEEK_SET) < 0) throw IoError(errno_message("cannot rewind", errno), context_for(target_));
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const ssize_t n = ::read(fd_, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(errno_message("cannot read back", errno), context_for(target_));
    }
    if (n == 0) break;
    write_fully(STDOUT_FILENO, buffer.data(), static_cast<std::size_t>(n), target_);
  }
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
    fd_ = ::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);  // read-only suffices for fsync and copy_to_stdout
    if (fd_ < 0) throw IoError(errno_message("cannot reopen temporary file", errno), context_for(target_));
  }
  if (is_stdio(target_)) {
    copy_to_stdout();
    close_fd();
    ::unlink(temp_path_.c_str());
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0) throw IoError(errno_message("cannot fsync", errno), context_for(target_));
  close_fd();
  if (::rename(temp_path_.c_str(), target_.c_str()) != 0) {
    throw IoError(errno_message("cannot rename the temporary file into place", errno), context_for(target_));
  }
  committed_ = true;
  fsync_directory(target_.parent_path());
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

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(AtomicFileWriter&)>& fill) {
  AtomicFileWriter writer(path);
  fill(writer);
  writer.commit();
}

}  // namespace fleet

namespace fleet {

void commit_directory_atomically(const std::filesystem::path& staging, const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
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
  if (fs::exists(target)) {
    // One atomic exchange: readers see either the old folder or the new one.
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      throw IoError(std::string("cannot replace the folder: ") + std::strerror(errno), context_for(target));
    fsync_directory(parent);
    fs::remove_all(staging, ec);  // now holds the previous contents
  } else {
    if (::rename(staging.c_str(), target.c_str()) != 0)
      throw IoError(std::string("cannot create the folder: ") + std::strerror(errno), context_for(target));
    fsync_directory(parent);
  }
}

void write_directory_atomically(const std::filesystem::path& target,
                                const std::function<void(const std::filesystem::path&)>& fill) {
  namespace fs = std::filesystem;
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  if (fs::exists(target, ec) && !fs::is_directory(target, ec))
    throw UsageError("exists and is not a folder", context_for(target));
  if (!fs::is_directory(parent, ec)) throw UsageError("folder does not exist", context_for(parent));
  std::string pattern = (parent / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw IoError(std::string("cannot create a temporary folder: ") + std::strerror(errno), context_for(parent));
  const fs::path temp(pattern);
  // mkdtemp makes 0700; give the folder the permissions a plain mkdir would.
  ::chmod(temp.c_str(), 0777 & ~current_umask());
  try {
    fill(temp);
    commit_directory_atomically(temp, target);
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
}

}  // namespace fleet
