// Reading files: whole-file reads and read-only memory maps, with IoError on failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace fleet {

/// The path that names standard input (for inputs) or standard output (for
/// outputs), as Unix tools spell it.
inline constexpr const char* kStdioPath = "-";

/// True when `path` is "-": standard input or output instead of a file.
inline bool is_stdio(const std::filesystem::path& path) { return path == kStdioPath; }

/// No cap on what read_file() reads.
inline constexpr std::uintmax_t kNoSizeLimit = UINTMAX_MAX;

/// Cap for documents (JSON, CSV, tokenizer files): far above any real one, so
/// that a huge file or an endless pipe given by mistake fails instead of
/// filling memory.
inline constexpr std::uintmax_t kMaxDocumentBytes = 256ull << 20;

/// Reads a whole file into a string; "-" reads standard input (once: later
/// reads of "-" return the same text). InputError naming the file when it is
/// missing, unreadable, a folder or a device: a bad input, whatever the reason. An input
/// of more than `max_bytes` is refused (InputError) without reading it all: a
/// regular file by its size, a pipe (whose size is unknown) once that much
/// has arrived.
std::string read_file(const std::filesystem::path& path, std::uintmax_t max_bytes = kNoSizeLimit);

/// Checks that `path` ("-" always can) can be opened as an input file, without
/// reading it; InputError naming the file and the cause (missing, unreadable,
/// a folder) otherwise.
void check_input_file(const std::filesystem::path& path);

/// A read-only, private memory map of a whole file. Movable, not copyable.
class MappedFile {
 public:
  MappedFile() = default;
  /// Maps `path`; InputError when it cannot be opened, IoError when it cannot
  /// be mapped. An empty file maps to an empty span.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The mapped bytes.
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  /// Size of the file in bytes.
  std::size_t size() const { return size_; }
  /// The path that was mapped.
  const std::filesystem::path& path() const { return path_; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace fleet
