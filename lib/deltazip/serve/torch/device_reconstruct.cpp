#include "deltazip/serve/torch/device_reconstruct.h"

#include <algorithm>
#include <map>
#include <string>

#include <torch/torch.h>

#include "common/error.h"
#include "deltazip/sbmm/sbmm.h"
#include "deltazip/torch/reconstruct.h"
#include "fleet/config.h"

#if FLEET_WITH_CUDA
#include "deltazip/sbmm/cuda/sbmm_cuda.h"
#endif
#if FLEET_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace fleet::deltazip {
namespace {

bool contains(const std::vector<std::string>& sorted, const std::string& name) {
  return std::binary_search(sorted.begin(), sorted.end(), name);
}

#if FLEET_WITH_CUDA
// `weights` (float32, contiguous, on the GPU, holding the base's values) +=
// the packed delta, decoded on the GPU on PyTorch's current stream.
void add_packed_on_gpu(const PackedMatrix& packed, torch::Tensor& weights) {
  const SbmmMatrix host(packed);  // validates the sizes before anything is uploaded
  const SbmmCudaMatrix device(host.layout());
  void* stream = nullptr;
#if FLEET_TORCH_CUDA
  stream = c10::cuda::getCurrentCUDAStream().stream();
#endif
  device.add_to(weights.data_ptr<float>(), stream);
  // The device copy is freed on leaving (cudaFree waits for the device's pending work).
}

model::LlamaModel rebuild_on_gpu(const DeltaReader& reader, const model::LlamaModel& base) {
  auto config = delta_config(reader);
  check_same_architecture(base.config(), config, reader.path().string());
  std::map<std::string, torch::Tensor> base_params;
  for (const auto& [name, t] : base.named_parameters()) base_params[name] = t;
  torch::NoGradGuard no_grad;
  // Each tensor of the new model starts as a device-to-device copy of the
  // base's and takes its delta in place: no second model-sized buffer. (The
  // reader checked every entry's shape against the model's on opening.)
  auto model = model::LlamaModel::uninitialized(config, torch::kFloat32, base.device());
  for (auto& [name, t] : model.named_parameters()) {
    t.copy_(base_params.at(name));
    if (contains(reader.packed_names(), name)) {
      add_packed_on_gpu(reader.packed(name), t);
    } else if (contains(reader.dense_names(), name)) {
      const auto entry = reader.dense(name);
      const auto stored = dense_tensor(entry).to(base.device(), torch::kFloat32);
      if (entry.kind == DenseKind::kFull)
        t.copy_(stored);
      else
        t.add_(stored);
    } else {
      throw InputError(reader.path().string() + ": no entry for tensor '" + name + "'");
    }
  }
  return model;
}
#endif

}  // namespace

model::LlamaModel reconstruct_on_base_device(const DeltaReader& reader, const model::LlamaModel& base) {
#if FLEET_WITH_CUDA
  if (base.device().is_cuda()) return rebuild_on_gpu(reader, base);
#endif
  return reconstruct_model(reader, base, base.device());
}

}  // namespace fleet::deltazip
