#include "deltazip/sbmm/cuda/sbmm_cuda.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <vector>

namespace fleet::deltazip {
namespace {

constexpr int kRowsPerPass = 8;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

template <typename T>
T* upload(const T* host, std::size_t count) {
  if (count == 0) return nullptr;
  T* device = nullptr;
  check(cudaMalloc(&device, count * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(device, host, count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  return device;
}

// `count` (<= 8) bits at bit `bit` of an LSB-first stream (padded by 8 bytes).
__device__ __forceinline__ unsigned read_bits(const std::uint8_t* data, std::uint64_t bit, int count) {
  const std::uint8_t* p = data + bit / 8;
  const unsigned window = static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8);
  return (window >> (bit % 8)) & ((1u << count) - 1u);
}

__device__ __forceinline__ float weight(const SbmmLayout& l, std::int64_t o, std::int64_t c, unsigned q) {
  const std::int64_t g = o * l.groups + c / l.group_size;
  if (l.levels) return l.levels[(g << l.bits) + q];
  return __fmul_rn(l.scales[g], __fsub_rn(static_cast<float>(q), l.zeros[g]));
}

// Calls use(c, level) for each kept weight of row o that lane `lane` of the
// row's warp takes (kept weights 32 apart): the decoding both kernels below
// share.
template <typename Use>
__device__ __forceinline__ void for_each_kept(const SbmmLayout& l, std::int64_t o, int lane, Use&& use) {
  if (l.kind == SbmmLayout::kUnstructured) {
    // Codes of the kept weights follow the mask: each 32-column chunk finds
    // its lanes' code indices with a ballot.
    std::uint64_t code = l.row_code_bit[o] / static_cast<std::uint64_t>(l.bits);
    const std::uint64_t row_bit = static_cast<std::uint64_t>(o * l.cols);
    for (std::int64_t base = 0; base < l.cols; base += 32) {
      const std::int64_t c = base + lane;
      const bool kept = c < l.cols && read_bits(l.indices, row_bit + static_cast<std::uint64_t>(c), 1);
      const unsigned ballot = __ballot_sync(0xffffffffu, kept);
      if (kept) {
        const std::uint64_t k = code + __popc(ballot & ((1u << lane) - 1u));
        use(c, weight(l, o, c, read_bits(l.codes, k * static_cast<std::uint64_t>(l.bits), l.bits)));
      }
      code += __popc(ballot);
    }
    return;
  }
  const std::int64_t keep = l.kind == SbmmLayout::kNOfM ? l.m - l.n : 1, m = l.kind == SbmmLayout::kNOfM ? l.m : 1;
  const std::int64_t kept = l.cols / m * keep, first = o * kept;
  for (std::int64_t k = lane; k < kept; k += 32) {
    std::int64_t c = k;
    if (l.kind == SbmmLayout::kNOfM) {
      const unsigned pos = read_bits(l.indices, static_cast<std::uint64_t>(first + k) * l.index_bits, l.index_bits);
      c = (k / keep) * m + (pos < m ? pos : m - 1);
    }
    use(c, weight(l, o, c, read_bits(l.codes, static_cast<std::uint64_t>(first + k) * l.bits, l.bits)));
  }
}

// Row o of y (up to kRowsPerPass input rows, n of them) += x · row o of Δ,
// by the warp of row o: lanes take kept weights 32 apart, then the warp sums
// each input row's partial products.
__device__ __forceinline__ void multiply_row(const SbmmLayout& l, std::int64_t o, int lane, const float* x, int n,
                                             float* y) {
  float acc[kRowsPerPass];
  for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
  for_each_kept(l, o, lane, [&](std::int64_t c, float w) {
    for (int r = 0; r < kRowsPerPass; ++r)
      if (r < n) acc[r] += w * x[r * l.cols + c];
  });
  for (int r = 0; r < kRowsPerPass; ++r) {
    if (r >= n) break;
    float v = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) y[r * l.rows + o] += v;
  }
}

__global__ void sbmm_kernel(SbmmLayout l, const float* x, int n, float* y) {
  const std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (o >= l.rows) return;
  multiply_row(l, o, threadIdx.x % 32, x, n, y);
}

// A grouped launch's products travel as the kernel's parameters (no copy to
// the GPU before the launch); blockIdx.y picks the product.
struct GroupedProduct {
  SbmmLayout layout;
  const float* x;
  float* y;
  int n;
};
constexpr int kMaxGrouped = 16;
struct ProductGroup {
  GroupedProduct products[kMaxGrouped];
};
static_assert(sizeof(ProductGroup) <= 4096, "a grouped launch must fit CUDA's 4 KB of kernel parameters");

// Every product's rows in passes of kRowsPerPass, each pass as sbmm_kernel
// computes it, so a grouped product equals its own launch to the bit.
__global__ void grouped_kernel(ProductGroup group) {
  const GroupedProduct& p = group.products[blockIdx.y];
  const std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (o >= p.layout.rows) return;
  for (int r0 = 0; r0 < p.n; r0 += kRowsPerPass)
    multiply_row(p.layout, o, threadIdx.x % 32, p.x + r0 * p.layout.cols,
                 p.n - r0 < kRowsPerPass ? p.n - r0 : kRowsPerPass, p.y + r0 * p.layout.rows);
}

// dense[o, c] += Δ[o, c], one warp per row. The level is rounded once (no
// fused multiply-add, see weight()) and added with one rounding, as the
// CPU's unpack_matrix followed by a float addition gives: base + Δ is the
// same float on both.
__global__ void add_to_kernel(SbmmLayout l, float* dense) {
  const std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (o >= l.rows) return;
  float* row = dense + o * l.cols;
  for_each_kept(l, o, threadIdx.x % 32, [&](std::int64_t c, float w) { row[c] = __fadd_rn(row[c], w); });
}

constexpr int kWarpsPerBlock = 4;

unsigned blocks_for_rows(std::int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

bool sbmm_cuda_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why) *why = status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

SbmmCudaMatrix::SbmmCudaMatrix(const SbmmLayout& host) : layout_(host) {
  const std::size_t scale_count = static_cast<std::size_t>(host.rows * host.groups);
  layout_.codes = upload(host.codes, host.code_bytes);
  layout_.indices = upload(host.indices, host.index_bytes);
  layout_.scales = upload(host.scales, host.scales ? scale_count : 0);
  layout_.zeros = upload(host.zeros, host.zeros ? scale_count : 0);
  layout_.levels = upload(host.levels, host.levels ? scale_count << host.bits : 0);
  if (host.row_code_bit) layout_.row_code_bit = upload(host.row_code_bit, static_cast<std::size_t>(host.rows) + 1);
}

SbmmCudaMatrix::~SbmmCudaMatrix() {
  cudaFree(const_cast<std::uint8_t*>(layout_.codes));
  cudaFree(const_cast<std::uint8_t*>(layout_.indices));
  cudaFree(const_cast<float*>(layout_.scales));
  cudaFree(const_cast<float*>(layout_.zeros));
  cudaFree(const_cast<float*>(layout_.levels));
  cudaFree(const_cast<std::uint64_t*>(layout_.row_code_bit));
}

void SbmmCudaMatrix::multiply_add(const float* x, std::int64_t n, float* y, void* stream) const {
  const unsigned blocks = blocks_for_rows(layout_.rows);
  for (std::int64_t r0 = 0; r0 < n; r0 += kRowsPerPass) {
    const int rows = static_cast<int>(n - r0 < kRowsPerPass ? n - r0 : kRowsPerPass);
    sbmm_kernel<<<blocks, kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(stream)>>>(layout_, x + r0 * layout_.cols,
                                                                                       rows, y + r0 * layout_.rows);
    check(cudaGetLastError(), "SBMM kernel launch");
  }
}

void SbmmCudaMatrix::multiply_add_host(const float* x, std::int64_t n, float* y) const {
  const std::size_t x_count = static_cast<std::size_t>(n * layout_.cols),
                    y_count = static_cast<std::size_t>(n * layout_.rows);
  float* dx = upload(x, x_count);
  float* dy = upload(y, y_count);
  multiply_add(dx, n, dy);
  check(cudaDeviceSynchronize(), "SBMM kernel");
  check(cudaMemcpy(y, dy, y_count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  cudaFree(dx);
  cudaFree(dy);
}

void sbmm_cuda_grouped(const SbmmCudaProduct* products, std::size_t count, void* stream) {
  for (std::size_t first = 0; first < count; first += kMaxGrouped) {
    ProductGroup group{};
    unsigned used = 0;
    std::int64_t rows = 0;
    for (std::size_t i = first; i < count && i < first + kMaxGrouped; ++i) {
      const SbmmCudaProduct& p = products[i];
      if (p.n <= 0) continue;
      if (p.n > (1 << 30)) throw std::runtime_error("SBMM: too many input rows for one product");
      group.products[used++] = {p.matrix->layout_, p.x, p.y, static_cast<int>(p.n)};
      rows = p.matrix->rows() > rows ? p.matrix->rows() : rows;
    }
    if (used == 0) continue;
    grouped_kernel<<<dim3(blocks_for_rows(rows), used), kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(stream)>>>(
        group);
    check(cudaGetLastError(), "grouped SBMM kernel launch");
  }
}

void sbmm_cuda_grouped_host(const SbmmCudaProduct* products, std::size_t count) {
  std::vector<SbmmCudaProduct> on_device(products, products + count);
  std::vector<float*> xs, ys;
  for (auto& p : on_device) {
    xs.push_back(upload(p.x, static_cast<std::size_t>(p.n * p.matrix->cols())));
    ys.push_back(upload(p.y, static_cast<std::size_t>(p.n * p.matrix->rows())));
    p.x = xs.back();
    p.y = ys.back();
  }
  sbmm_cuda_grouped(on_device.data(), on_device.size());
  check(cudaDeviceSynchronize(), "grouped SBMM kernel");
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t y_count = static_cast<std::size_t>(products[i].n * products[i].matrix->rows());
    if (y_count)
      check(cudaMemcpy(products[i].y, ys[i], y_count * sizeof(float), cudaMemcpyDeviceToHost),
            "cudaMemcpy to the host");
    cudaFree(xs[i]);
    cudaFree(ys[i]);
  }
}

void SbmmCudaMatrix::add_to(float* dense, void* stream) const {
  if (layout_.rows == 0) return;
  add_to_kernel<<<blocks_for_rows(layout_.rows), kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(stream)>>>(layout_,
                                                                                                              dense);
  check(cudaGetLastError(), "decoding kernel launch");
}

void SbmmCudaMatrix::add_to_host(float* dense) const {
  const std::size_t count = static_cast<std::size_t>(layout_.rows * layout_.cols);
  float* device = upload(dense, count);
  add_to(device);
  check(cudaDeviceSynchronize(), "decoding kernel");
  check(cudaMemcpy(dense, device, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  cudaFree(device);
}

}  // namespace fleet::deltazip
