// Atomic file output: write to a temporary file in the target's folder,
// fsync, then rename over the target, so a crash or an error never leaves a
// half-written result and never destroys the previous one.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fleet {

/// One pending atomic write. The temporary file is removed unless commit()
/// succeeds, so an exception anywhere before commit leaves the target as it was.
class AtomicFileWriter {
 public:
  /// Creates "<dir>/.<name>.tmp-XXXXXX" beside `target`; UsageError when the
  /// folder is missing or the target is a folder, IoError when the folder is
  /// not writable. A target of "-" is standard output: the bytes go to a
  /// private temporary file and are copied to stdout by commit().
  explicit AtomicFileWriter(std::filesystem::path target);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  /// Path of the temporary file, for libraries that open files by name
  /// (HDF5): call close_fd() first, let them write, then commit().
  const std::filesystem::path& temp_path() const { return temp_path_; }
  /// The final path.
  const std::filesystem::path& target() const { return target_; }

  /// Appends bytes (retrying short writes); IoError on failure.
  void write(std::span<const std::byte> bytes);
  /// Appends text.
  void write(std::string_view text);
  /// Closes our descriptor so another library can write the temporary file by name.
  void close_fd();
  /// fsyncs the data, renames it over the target and fsyncs the folder
  /// (for "-": copies the data to standard output).
  void commit();

 private:
  void discard() noexcept;
  void copy_to_stdout();

  std::filesystem::path target_;
  std::filesystem::path temp_path_;
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
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(AtomicFileWriter&)>& fill);

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
