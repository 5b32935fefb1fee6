// A CUDA runtime program linked statically to cudart, for the GPU check of
// the interposer: the static runtime reaches the driver only through
// dlopen + cuGetProcAddress, which liborion_client.so must still catch.
// Runs REQUESTS requests of KERNELS kernels between cudaProfilerStart/Stop
// and checks the result on the host.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void add_one(float* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1.0f;
}

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 10;
  const int kernels = argc > 2 ? std::atoi(argv[2]) : 8;
  const int n = 1 << 20;
  float* data = nullptr;
  if (cudaMalloc(&data, n * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "static_cudart_app: no usable GPU\n");
    return 77;
  }
  cudaMemset(data, 0, n * sizeof(float));
  for (int r = 0; r < requests; ++r) {
    cudaProfilerStart();
    for (int k = 0; k < kernels; ++k) add_one<<<(n + 255) / 256, 256>>>(data, n);
    cudaDeviceSynchronize();
    cudaProfilerStop();
  }
  std::vector<float> host(n);
  cudaMemcpy(host.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost);
  const float expected = static_cast<float>(requests * kernels);
  for (int i = 0; i < n; ++i) {
    if (host[i] != expected) {
      std::fprintf(stderr, "static_cudart_app: element %d is %g, expected %g\n", i, host[i], expected);
      return 1;
    }
  }
  std::printf("static_cudart_app: %d requests of %d kernels, result correct\n", requests, kernels);
  return 0;
}
