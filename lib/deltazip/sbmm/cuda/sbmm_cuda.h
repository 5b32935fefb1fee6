// The SBMM kernel on a GPU: one warp per output row reads the packed delta
// (any bit width, n:m or unstructured sparsity, per-row or per-group scales)
// and multiplies it with up to 8 input rows per pass, adding into y; and the
// same decoding added into a dense matrix (a swap rebuilt on the GPU).
// Checked against the CPU kernels by the gpu-labelled tests. C++17 (nvcc),
// no libtorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "deltazip/sbmm/sbmm_layout.h"

namespace fleet::deltazip {

/// True when a CUDA device can be used; otherwise `why` says what is missing.
bool sbmm_cuda_available(std::string* why = nullptr);

class SbmmCudaMatrix;

/// One product of a grouped launch: y [n, rows] += x [n, cols] · Δᵀ with
/// `matrix`'s Δ, x and y row-major in device memory.
struct SbmmCudaProduct {
  const SbmmCudaMatrix* matrix = nullptr;
  const float* x = nullptr;
  std::int64_t n = 0;
  float* y = nullptr;
};

/// Every product of `products` (`count` of them, any matrices and row
/// counts; outputs must not overlap) in one kernel launch per 16 products,
/// on `stream`: a linear layer's delta products for all variants of a step
/// at once instead of one launch per variant and 8 rows. Each product's
/// result equals its own multiply_add() to the bit.
void sbmm_cuda_grouped(const SbmmCudaProduct* products, std::size_t count, void* stream = nullptr);
/// The same with host arrays for x and y (copies in and out, waits): for tests.
void sbmm_cuda_grouped_host(const SbmmCudaProduct* products, std::size_t count);

/// A packed delta copied to the current GPU. Throws std::runtime_error with
/// CUDA's message when the copy fails.
class SbmmCudaMatrix {
 public:
  explicit SbmmCudaMatrix(const SbmmLayout& host);
  ~SbmmCudaMatrix();
  SbmmCudaMatrix(const SbmmCudaMatrix&) = delete;
  SbmmCudaMatrix& operator=(const SbmmCudaMatrix&) = delete;

  std::int64_t rows() const { return layout_.rows; }
  std::int64_t cols() const { return layout_.cols; }

  /// y[r, o] += Σ_c x[r, c] Δ[o, c] for r < n, with x [n, cols] and y
  /// [n, rows] row-major in device memory, on `stream` (a cudaStream_t;
  /// nullptr: the default stream).
  void multiply_add(const float* x, std::int64_t n, float* y, void* stream = nullptr) const;

  /// The same with host arrays (copies in and out, waits): for tests and checks.
  void multiply_add_host(const float* x, std::int64_t n, float* y) const;

  /// dense[o, c] += Δ[o, c] for every kept weight, `dense` [rows, cols]
  /// row-major in device memory, on `stream`: a fine-tuned matrix rebuilt
  /// where the base already is. Each level is rounded once and added with
  /// one rounding, so the result equals the CPU's base + unpack_matrix().
  void add_to(float* dense, void* stream = nullptr) const;
  /// The same with a host array (copies in and out, waits): for tests.
  void add_to_host(float* dense) const;

 private:
  friend void sbmm_cuda_grouped(const SbmmCudaProduct*, std::size_t, void*);
  SbmmLayout layout_;  ///< pointers into device memory
};

}  // namespace fleet::deltazip
