#include "model/torch/tensor_bridge.h"

#include <cstring>
#include <vector>

#include "common/error.h"

namespace fleet::model {

torch::ScalarType torch_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return torch::kFloat64;
    case DType::kF32:
      return torch::kFloat32;
    case DType::kF16:
      return torch::kFloat16;
    case DType::kBF16:
      return torch::kBFloat16;
    case DType::kI64:
      return torch::kInt64;
    case DType::kI32:
      return torch::kInt32;
    case DType::kI16:
      return torch::kInt16;
    case DType::kI8:
      return torch::kInt8;
    case DType::kU8:
      return torch::kUInt8;
    case DType::kBool:
      return torch::kBool;
    default:
      throw InputError("dtype " + std::string(dtype_name(dtype)) + " has no libtorch equivalent in this build");
  }
}

DType dtype_of(torch::ScalarType type) {
  for (DType d : kAllDTypes) {
    try {
      if (torch_scalar_type(d) == type) return d;
    } catch (const InputError&) {
      // no torch type for d; keep looking
    }
  }
  throw InputError(std::string("torch type ") + c10::toString(type) + " cannot be stored");
}

torch::Tensor to_torch(const TensorView& view) {
  const auto options = torch::TensorOptions().dtype(torch_scalar_type(view.dtype));
  torch::Tensor out = torch::empty(view.shape, options);
  if (!view.data.empty()) std::memcpy(out.data_ptr(), view.data.data(), view.data.size());
  return out;
}

void add_to_writer(SafetensorsWriter& writer, const std::string& name, const torch::Tensor& tensor) {
  const torch::Tensor cpu = tensor.to(torch::kCPU).contiguous();
  const auto* begin = static_cast<const std::byte*>(cpu.data_ptr());
  std::vector<std::byte> bytes(begin, begin + cpu.nbytes());
  writer.add_owned(name, dtype_of(cpu.scalar_type()), cpu.sizes().vec(), std::move(bytes));
}

}  // namespace fleet::model
