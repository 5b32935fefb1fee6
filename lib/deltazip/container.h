// The delta container: one HDF5 file (lib/common's store, zstd filter 32015)
// holding a compressed fine-tune as its delta from a base model. Layout in
// docs/formats.md ("DeltaZip container"). No libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/hdf5_store.h"
#include "deltazip/low_rank.h"
#include "deltazip/packing.h"
#include "deltazip/row_delta.h"
#include "model/llama_config.h"

namespace fleet::model {
class ModelFolder;
}

namespace fleet::deltazip {

inline constexpr const char* kContainerFormat = "gpufleet-deltazip";
/// 2: newest HDF5 format (checksummed metadata), fixed-length strings, a
/// checksum on every tensor. Version 1 files are refused.
inline constexpr std::int64_t kContainerVersion = 2;

/// What the file says about itself.
struct DeltaHeader {
  std::string settings_json;  ///< the compression settings, as JSON text
  std::string base_identity;  ///< hash of the base model (base_identity())
  std::string config_json;    ///< the fine-tuned model's config.json text
};

/// How a tensor that is not a compressed linear layer is stored.
enum class DenseKind { kDelta, kFull };

/// A dense tensor entry. A row delta (DeltaWriter::add_row_delta) reads
/// back as a float32 delta of the full shape.
struct DenseEntry {
  DenseKind kind = DenseKind::kDelta;
  StoredTensor tensor;
  std::string form;  ///< how it is stored, for people: "dense delta", "full", "8-bit rows (212 of 260)"
};

/// Writes a container; nothing appears at the path unless commit() runs.
class DeltaWriter {
 public:
  DeltaWriter(const std::filesystem::path& path, const DeltaHeader& header, int zstd_level);
  /// A compressed linear layer's delta.
  void add_packed(const std::string& name, const PackedMatrix& matrix);
  /// A compressed linear layer's delta as two factors (low_rank.h).
  void add_low_rank(const std::string& name, const LowRankMatrix& matrix);
  /// A dense tensor (delta or full fine-tuned values).
  void add_dense(const std::string& name, DenseKind kind, DType dtype, const std::vector<std::int64_t>& shape,
                 std::span<const std::byte> data);
  /// A delta stored as its changed rows, quantized (row_delta.h); reads
  /// back through DeltaReader::dense.
  void add_row_delta(const std::string& name, const RowDelta& delta);
  /// Publishes the file; returns its size in bytes.
  std::uint64_t commit();

 private:
  void write_packed(const std::string& group, const PackedMatrix& matrix);

  Hdf5Store store_;
  TensorWriteOptions write_options_;
};

/// Reads a container; InputError naming the file for anything malformed:
/// a damaged file (its seal), corrupt metadata, a tensor whose checksum does
/// not match, a config above the caps, an entry missing, extra, stored
/// twice or shaped unlike the model's tensor (all checked on opening, before
/// any tensor is read or allocated).
class DeltaReader {
 public:
  explicit DeltaReader(const std::filesystem::path& path);

  const DeltaHeader& header() const { return header_; }
  /// Names of the compressed linear layers, sorted.
  const std::vector<std::string>& packed_names() const { return packed_; }
  /// Names of the linear layers stored as two factors, sorted.
  const std::vector<std::string>& low_rank_names() const { return low_rank_; }
  /// Names of the dense tensors (row deltas included), sorted.
  const std::vector<std::string>& dense_names() const { return dense_; }
  PackedMatrix packed(const std::string& name) const;
  LowRankMatrix low_rank(const std::string& name) const;
  DenseEntry dense(const std::string& name) const;
  /// Bytes on disk of each tensor (after zstd).
  std::uint64_t stored_bytes(const std::string& name) const;
  /// Elements of each tensor (weights it represents).
  std::int64_t elements(const std::string& name) const;
  const std::filesystem::path& path() const { return store_.path(); }
  /// Size of the container in bytes.
  std::uint64_t file_bytes() const { return store_.file_bytes(); }

 private:
  void check_layout(const std::vector<model::ParameterShape>& model_tensors);
  DenseEntry row_delta_entry(const std::string& name) const;
  PackedMatrix read_packed(const std::string& group, const std::string& label) const;

  Hdf5Store store_;
  DeltaHeader header_;
  std::vector<std::string> packed_, low_rank_, dense_;
  std::vector<std::string> row_deltas_;                            ///< the dense_ entries stored as row deltas, sorted
  std::map<std::string, std::vector<std::int64_t>> dense_shapes_;  ///< the model's shape of each dense entry
  std::map<std::string, std::vector<std::int64_t>> low_rank_shapes_;  ///< likewise of each low-rank delta
};

/// Identity of a model folder: FNV-1a over its config.json text, every
/// tensor's name, dtype and shape, and samples of every tensor's bytes (the
/// first and last 4 KiB and 16 evenly spaced 256-byte blocks), as 16 hex digits.
std::string base_identity(const model::ModelFolder& model);
std::string base_identity(const std::filesystem::path& model_dir);

}  // namespace fleet::deltazip
