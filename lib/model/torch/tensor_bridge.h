// Conversions between stored tensors (safetensors/HDF5 bytes) and libtorch
// tensors. Include only from torch targets.
#pragma once

#include <string>

#include <torch/types.h>

#include "common/dtype.h"
#include "common/safetensors.h"
#include "model/torch/compute_device.h"

namespace fleet::model {

/// The torch scalar type of a stored dtype; InputError for types this
/// libtorch lacks (U16/U32/U64, F8 in libtorch 1.x).
torch::ScalarType torch_scalar_type(DType dtype);
/// The stored dtype of a torch scalar type; InputError when it has none.
DType dtype_of(torch::ScalarType type);

/// The libtorch device of a resolved --device (the current CUDA device for kCuda).
inline torch::Device torch_device(ComputeDevice device) {
  return device == ComputeDevice::kCuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

/// Copies a view into a new CPU tensor (the view's file may then be closed).
torch::Tensor to_torch(const TensorView& view);
/// Adds `tensor` (any device; copied to contiguous CPU memory) to `writer`.
void add_to_writer(SafetensorsWriter& writer, const std::string& name, const torch::Tensor& tensor);

}  // namespace fleet::model
