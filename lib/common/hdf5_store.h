// A store of named tensors with attributes in one HDF5 file, chunked and
// compressed with zstd (filter 32015) so h5py + hdf5plugin read it unchanged.
//
// Type mapping (h5py-compatible): F64/F32 IEEE little-endian; F16 the
// 16-bit IEEE float h5py writes for numpy.float16; BF16 a 16-bit float with
// 8 exponent bits (h5py reads it converted to float16); integers as
// H5T_STD_*LE; BOOL as h5py's int8 enum {FALSE, TRUE}; F8 types as uint8 with
// a string attribute "dtype". A '/' in a tensor name makes groups.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/dtype.h"

namespace fleet {

/// An attribute value: scalars, strings and 1-D numeric arrays.
using AttrValue = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>, std::vector<double>>;

/// How write_tensor stores a tensor.
struct TensorWriteOptions {
  std::optional<int> zstd_level = 3;           ///< nullopt: no compression
  std::uint64_t target_chunk_bytes = 1 << 20;  ///< chunks of about this size
};

/// A tensor read back into memory.
struct StoredTensor {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;  ///< row-major, little-endian
};

/// Shape, type and on-disk size of a stored tensor.
struct StoredTensorInfo {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t stored_bytes = 0;  ///< bytes on disk after compression
  bool compressed = false;         ///< zstd filter in the pipeline
};

/// One HDF5 file of tensors. Created stores write to a temporary file that
/// commit() renames into place; an uncommitted store leaves no trace. Files
/// are written in the newest HDF5 format (checksummed metadata), strings as
/// fixed-length UTF-8, and every tensor with an FNV-1a checksum of its
/// decoded bytes ("fnv1a64" attribute) that read_tensor verifies. "-" opens
/// standard input (read) or writes standard output (create).
class Hdf5Store {
 public:
  /// Starts a new file at `path` (published by commit()).
  static Hdf5Store create(const std::filesystem::path& path);
  /// Opens an existing file read-only; InputError when it is not HDF5.
  static Hdf5Store open(const std::filesystem::path& path);

  Hdf5Store(Hdf5Store&&) noexcept;
  Hdf5Store& operator=(Hdf5Store&&) noexcept;
  ~Hdf5Store();

  /// Writes a tensor; InputError when it exists or bytes do not match dtype x shape.
  void write_tensor(const std::string& name, DType dtype, std::span<const std::int64_t> shape,
                    std::span<const std::byte> data, const TensorWriteOptions& options = {});
  /// True when a dataset `name` exists.
  bool contains(const std::string& name) const;
  /// Type, shape and storage size of `name`.
  StoredTensorInfo info(const std::string& name) const;
  /// Reads `name` whole. InputError, before allocating, when its decoded size
  /// exceeds `max_bytes`; InputError when its stored checksum (written by
  /// write_tensor) does not match the decoded bytes.
  StoredTensor read_tensor(const std::string& name, std::uint64_t max_bytes = UINT64_MAX) const;
  /// Makes read_tensor refuse tensors without a checksum (formats that always write one).
  void require_checksums(bool required);
  /// Names of all datasets, sorted ("group/name" for nested ones).
  std::vector<std::string> tensor_names() const;

  /// Sets attribute `key` on `object` ("" = the file's root group), replacing any old value.
  void set_attribute(const std::string& object, const std::string& key, const AttrValue& value);
  /// The attribute, or nullopt when absent.
  std::optional<AttrValue> find_attribute(const std::string& object, const std::string& key) const;
  /// The attribute; InputError naming file, object and key when absent.
  AttrValue attribute(const std::string& object, const std::string& key) const;
  /// All attributes of `object`.
  std::map<std::string, AttrValue> attributes(const std::string& object) const;

  /// Closes the file and renames it into place (create mode only); returns its size in bytes.
  std::uint64_t commit();
  /// Size of the open file in bytes.
  std::uint64_t file_bytes() const;
  /// The path given to create() or open().
  const std::filesystem::path& path() const;

 private:
  struct State;
  explicit Hdf5Store(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  bool require_checksums_ = false;
};

}  // namespace fleet
