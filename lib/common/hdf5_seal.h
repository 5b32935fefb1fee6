// The HDF5 store's seal: a digest of the whole file kept in HDF5's user block
// (the first 512 bytes, which libhdf5 skips and h5py reads past), written
// after libhdf5 has closed the file and checked before libhdf5 sees it.
// libhdf5 1.10 can crash, hang or free twice on damaged link or group
// metadata, and the per-tensor checksums are read through it; with the seal,
// a damaged or truncated file is refused before any HDF5 call.
//
// Layout of the 512 bytes: the ASCII lines
//   "gpufleet-hdf5-seal 1\n"
//   "bytes <the file's size in bytes>\n"
//   "fnv1a64 <16 lower-case hex digits: FNV-1a 64 of bytes 512 to the end>\n"
// then NUL bytes up to offset 512, where the HDF5 superblock starts.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace fleet {

/// Size of the user block that carries the seal.
inline constexpr std::size_t kHdf5SealBytes = 512;

/// Writes the seal into the user block of the closed file `path` (created
/// with a user block of kHdf5SealBytes). IoError when it cannot.
void seal_hdf5_file(const std::filesystem::path& path);

/// What verification found.
enum class Hdf5Seal {
  kVerified,  ///< sealed, and the digest and size match
  kUnsealed,  ///< no user block (the HDF5 signature at byte 0): an older or foreign file, read as it is
};

/// Checks the file against its seal, reading it once. InputError naming the
/// file when the seal is damaged, the size or the digest differs (a damaged
/// or truncated file), or a user block carries no seal.
Hdf5Seal verify_hdf5_file(const std::filesystem::path& path);
/// The same for a file image in memory; `name` is used in errors.
Hdf5Seal verify_hdf5_image(std::span<const std::byte> image, const std::filesystem::path& name);

}  // namespace fleet
