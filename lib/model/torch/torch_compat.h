// The one place where the libtorch generations differ for this project:
// Debian's libtorch 1.13 (CPU, what CI builds) and PyTorch's libtorch 2.x
// (CUDA, what GPU clusters use). Everything else is written once against the
// API both share. Include only from .cpp files of libtorch targets.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace fleet::model::compat {

/// True when this build's libtorch is 2.x or newer.
inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// c10::Allocator: `allocate` is const up to 2.2 and not from 2.3 on, which
// also added the pure virtual `copy_data`. An allocator written for both
// declares `DataPtr allocate(size_t n) FLEET_ALLOCATE_CONST override` and
// defines copy_data under FLEET_ALLOCATOR_HAS_COPY_DATA.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define FLEET_ALLOCATE_CONST
#define FLEET_ALLOCATOR_HAS_COPY_DATA 1
#else
#define FLEET_ALLOCATE_CONST const
#define FLEET_ALLOCATOR_HAS_COPY_DATA 0
#endif

/// Enables CUDA autocast to `dtype` (bfloat16 matrix products, float32
/// weights and reductions) for the life of the guard; restores the previous
/// state after. 1.13 calls the switches set_enabled/set_autocast_gpu_dtype,
/// 2.x set_autocast_enabled/set_autocast_dtype with a device type.
class CudaAutocast {
 public:
  explicit CudaAutocast(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
    was_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    was_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
#endif
  }
  ~CudaAutocast() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
#else
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
#endif
    at::autocast::clear_cache();
  }
  CudaAutocast(const CudaAutocast&) = delete;
  CudaAutocast& operator=(const CudaAutocast&) = delete;

 private:
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace fleet::model::compat
