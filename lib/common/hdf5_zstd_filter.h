// The zstd HDF5 filter (registered id 32015), implemented on libzstd and
// registered in-process so files stay readable by h5py + hdf5plugin.
#pragma once

namespace fleet {

/// HDF5 filter id registered for Zstandard (used by hdf5plugin and others).
inline constexpr int kHdf5ZstdFilterId = 32015;

/// Registers the filter once per process (thread-safe); also turns off
/// HDF5's automatic error printing, since we report errors ourselves.
void ensure_hdf5_zstd_filter();

}  // namespace fleet
