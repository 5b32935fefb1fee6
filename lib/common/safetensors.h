// safetensors: reader (memory-mapped, zero-copy views, sharded checkpoints
// through model.safetensors.index.json) and writer (atomic, sharded).
//
// File layout: u64 little-endian N, N bytes of JSON header, then the data
// buffer. The header maps tensor names to {dtype, shape, data_offsets} (offsets
// relative to the buffer) plus an optional "__metadata__" string map. Every
// header is validated before any tensor is touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/file_io.h"

namespace fleet {

/// Largest header we accept (the reference implementation's limit).
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100u << 20;

/// Where one tensor lives in a safetensors file.
struct TensorInfo {
  std::string name;                 ///< tensor name
  DType dtype = DType::kF32;        ///< element type
  std::vector<std::int64_t> shape;  ///< dimensions, outermost first
  std::uint64_t begin = 0;          ///< first byte, relative to the data buffer
  std::uint64_t end = 0;            ///< one past the last byte

  /// Number of elements.
  std::uint64_t numel() const;
  /// Size in bytes (end - begin).
  std::uint64_t nbytes() const { return end - begin; }
};

/// A read-only view of one tensor's bytes inside a mapped file.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;

  /// Number of elements.
  std::uint64_t numel() const;
  /// Typed view; throws InputError when T does not match the dtype's size or
  /// the data is not aligned for T (then copy the bytes instead).
  template <typename T>
  std::span<const T> as() const {
    check_typed_access(sizeof(T), alignof(T));
    return {reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T)};
  }
  /// Elements converted to double (any dtype; F8 types are not converted and throw).
  std::vector<double> to_double() const;

 private:
  void check_typed_access(std::size_t size, std::size_t alignment) const;
};

/// The parsed and validated header of one file.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;              ///< sorted by name
  std::map<std::string, std::string> metadata;  ///< "__metadata__", if any
  std::uint64_t data_start = 0;                 ///< 8 + header length
};

/// Parses and validates a header against the whole file's bytes: length
/// bounds, JSON, known dtypes, shapes, offsets inside the buffer, no overlaps,
/// dtype x shape = byte length, no duplicate names. Throws InputError naming
/// `file_name`, the tensor and the byte offset where it can.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& file_name);

/// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  /// Maps and validates `path`.
  explicit SafetensorsFile(const std::filesystem::path& path);

  /// Tensors sorted by name.
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  /// The "__metadata__" map.
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  /// True when the file holds `name`.
  bool contains(const std::string& name) const;
  /// Location of `name`; InputError when absent.
  const TensorInfo& info(const std::string& name) const;
  /// Zero-copy view of `name`, valid while this object lives.
  TensorView view(const std::string& name) const;
  /// The file's path.
  const std::filesystem::path& path() const { return map_.path(); }

 private:
  MappedFile map_;
  SafetensorsHeader header_;
};

/// A checkpoint that may span several files: a single .safetensors file, a
/// model.safetensors.index.json, or a folder holding either.
class SafetensorsCheckpoint {
 public:
  /// Opens and validates every shard; InputError when the index names a
  /// missing shard or tensor, or two shards hold the same name.
  explicit SafetensorsCheckpoint(const std::filesystem::path& path);

  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  /// True when some shard holds `name`.
  bool contains(const std::string& name) const { return owner_.count(name) != 0; }
  /// Location of `name` in its shard.
  const TensorInfo& info(const std::string& name) const;
  /// Zero-copy view of `name`.
  TensorView view(const std::string& name) const;
  /// Metadata of the first shard (sharded writers repeat it in every shard).
  const std::map<std::string, std::string>& metadata() const;
  /// The shard files, in index order.
  std::vector<std::filesystem::path> files() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const SafetensorsFile*> owner_;
};

/// Hugging Face's name of shard `index` (0-based) of `count`:
/// `<stem>-0000i-of-0000n.safetensors`.
std::string safetensors_shard_name(const std::string& stem, std::size_t index, std::size_t count);

/// Writes `<stem>.safetensors.index.json` in `dir` atomically: every tensor's
/// shard file (`weight_map`, in the order given) and the data's total bytes.
/// Writers write it after their shards, so a reader never finds an index
/// whose shards are missing.
std::filesystem::path write_safetensors_index(const std::filesystem::path& dir, const std::string& stem,
                                              const std::vector<std::pair<std::string, std::string>>& weight_map,
                                              std::uint64_t total_bytes);

/// Collects tensors and writes them as one file or as shards. Data spans are
/// not copied: they must stay valid until write() returns.
class SafetensorsWriter {
 public:
  /// Adds a tensor; InputError on a duplicate name or a byte length that does
  /// not match dtype x shape.
  void add(const std::string& name, DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> data);
  /// Adds a tensor whose bytes the writer keeps.
  void add_owned(const std::string& name, DType dtype, std::vector<std::int64_t> shape, std::vector<std::byte> data);
  /// Sets one "__metadata__" entry.
  void set_metadata(const std::string& key, const std::string& value);
  /// Total bytes of tensor data added so far.
  std::uint64_t data_bytes() const;

  /// Writes one file atomically. Tensors are ordered by descending element
  /// size, then name, so that each starts aligned to its element size.
  void write(const std::filesystem::path& path) const;
  /// Writes `<stem>.safetensors` when everything fits in `max_shard_bytes`,
  /// else `<stem>-0000i-of-0000n.safetensors` plus `<stem>.safetensors.index.json`.
  /// Returns the files written.
  std::vector<std::filesystem::path> write_sharded(const std::filesystem::path& dir, std::uint64_t max_shard_bytes,
                                                   const std::string& stem = "model") const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::span<const std::byte> data;
  };
  // Descending element size, then name: each tensor starts aligned to its element size.
  static std::vector<const Entry*> aligned_order(std::vector<const Entry*> entries);
  void write_entries(const std::filesystem::path& path, const std::vector<const Entry*>& entries) const;

  std::vector<Entry> entries_;
  std::vector<std::vector<std::byte>> owned_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace fleet
