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

/// Puts every layer's errors in units of calibration loss: a layer's output
/// error costs the model more or less depending on where the layer sits, so
/// each layer's errors are multiplied by `loss_added[l]` (the loss its
/// `probe` form alone added on the calibration text) over that form's error.
/// A layer whose probe barely moved the loss, or lowered it (noise), is
/// charged at least a tenth of the mean positive loss a probe added, so its
/// errors are never free. InputError when the sizes disagree or `probe` is
/// not a form of every layer.
void weigh_errors_by_loss(std::vector<std::vector<FormCost>>& candidates, const std::vector<double>& loss_added,
                          std::size_t probe);

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
