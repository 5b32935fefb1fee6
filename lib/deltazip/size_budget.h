// Compressing to a size instead of to knobs: what each candidate form of a
// linear layer would cost on disk, and which form each layer takes so that
// the container meets a byte budget with the least total error. No libtorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "deltazip/packing.h"

namespace fleet::deltazip {

/// One way to store one linear layer's delta: its bytes in the container
/// and the layer's output error tr(E H E^T) it leaves.
struct FormCost {
  std::uint64_t bytes = 0;
  double error = 0;
};

/// Bytes `matrix` takes in a container at `zstd_level`: each of its arrays
/// through zstd as the container's filter does, plus `overhead_per_array`
/// for its HDF5 metadata.
std::uint64_t estimated_container_bytes(const PackedMatrix& matrix, int zstd_level, std::uint64_t overhead_per_array);

/// The form of each layer (an index into its candidates) whose bytes sum to
/// at most `budget` with the least total error found: the Lagrangian choice
/// (each layer minimises error + lambda * bytes, lambda bisected to the
/// budget; or the same form everywhere, when that is better), then while
/// bytes are left, the single change that removes the
/// most error per extra byte and still fits. Every layer needs at least one
/// candidate; UsageError when even the smallest form of every layer exceeds
/// the budget (the message says by how much).
std::vector<std::size_t> allocate_forms(const std::vector<std::vector<FormCost>>& candidates, std::uint64_t budget);

}  // namespace fleet::deltazip
