// Reading files: whole-file reads and read-only memory maps, with IoError on failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace fleet {

/// Reads a whole file into a string; IoError naming the file when it cannot.
std::string read_file(const std::filesystem::path& path);

/// A read-only, private memory map of a whole file. Movable, not copyable.
class MappedFile {
 public:
  MappedFile() = default;
  /// Maps `path`; IoError when it cannot be opened or mapped. An empty file maps to an empty span.
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
