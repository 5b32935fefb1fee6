// Atomic file output: write to a temporary file in the target's folder,
// fsync, then rename over the target, so a crash, an error or a signal never
// leaves a half-written result and never destroys the previous one.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/output_path.h"
#include "common/signal_cleanup.h"

namespace fleet {

/// One pending write of one output file. A regular file (or a new name) is
/// written to a temporary file in its folder and renamed over it by commit(),
/// so an exception anywhere before commit leaves the target as it was and
/// removes the temporary file (a signal that ends the process removes it
/// too). An output that is standard output ("-", /dev/stdout) or an existing
/// FIFO or character device is never replaced: the bytes are collected in a
/// temporary file in TMPDIR and written into it by commit(), so a failed
/// command sends nothing. A symbolic link is followed: the file it points to
/// is replaced, the link stays.
class AtomicFileWriter {
 public:
  /// Resolves `target` (resolve_output) and opens the temporary file.
  /// UsageError when the folder is missing, the target is a folder, a socket
  /// or a block device, or its name is longer than the folder accepts;
  /// IoError when the temporary file cannot be created.
  explicit AtomicFileWriter(std::filesystem::path target);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  /// Path of the temporary file, for libraries that open files by name
  /// (HDF5): call close_fd() first, let them write, then commit().
  const std::filesystem::path& temp_path() const { return temp_path_; }
  /// The output as given (normalised).
  const std::filesystem::path& target() const { return target_; }

  /// Appends bytes (retrying short writes); IoError on failure.
  void write(std::span<const std::byte> bytes);
  /// Appends text.
  void write(std::string_view text);
  /// Closes our descriptor so another library can write the temporary file by name.
  void close_fd();
  /// Publishes the data: fsyncs it, renames it over the target and fsyncs
  /// the folder; or copies it into the stream. IoError on any failure.
  void commit();

 private:
  void discard() noexcept;
  void copy_to_stream();

  std::filesystem::path target_;
  OutputTarget resolved_;
  std::filesystem::path temp_path_;
  RemoveOnSignal temp_removal_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes `contents` to `path` atomically.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);
/// Writes several files all or none: every temporary file is written before
/// the first one is renamed into place.
void write_files_atomically(const std::vector<std::pair<std::filesystem::path, std::string>>& files);
/// Lets `fill` write through the writer, then commits; any exception from
/// `fill` discards the temporary file and leaves `path` untouched.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(AtomicFileWriter&)>& fill);

/// Builds a whole folder atomically: `fill` writes into a fresh temporary
/// folder beside `target`, which then takes the target's place in one atomic
/// exchange (the previous folder, if any, is removed afterwards). An
/// exception from `fill` removes the temporary folder and leaves `target` as
/// it was. For model folders and training checkpoints.
void write_directory_atomically(const std::filesystem::path& target,
                                const std::function<void(const std::filesystem::path&)>& fill);

/// The commit step of write_directory_atomically for a folder built by other
/// means (several processes writing into it): fsyncs its files, then puts
/// `staging` in `target`'s place in one atomic exchange (or rename) and
/// removes the previous contents. `staging` must sit beside `target`.
void commit_directory_atomically(const std::filesystem::path& staging, const std::filesystem::path& target);

}  // namespace fleet
