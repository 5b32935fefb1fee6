#include "deltazip/serve/torch/device_reconstruct.h"

#include <torch/torch.h>

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
#endif

}  // namespace

model::LlamaModel reconstruct_on_base_device(const DeltaReader& reader, const model::LlamaModel& base) {
#if FLEET_WITH_CUDA
  if (base.device().is_cuda()) return reconstruct_model(reader, base, base.device(), add_packed_on_gpu);
#endif
  return reconstruct_model(reader, base, base.device());
}

}  // namespace fleet::deltazip
