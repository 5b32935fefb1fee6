// c10d's NCCL backend in a world of one: a CUDA libtorch that ships it can
// build a process group over a FileStore and all-reduce GPU tensors. Skips
// without a GPU, and where the libtorch has no NCCL (Debian's CPU build).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace {

TEST(NcclGpu, WorldOfOneAllReduces) {
#ifndef USE_C10D_NCCL
  GTEST_SKIP() << "this libtorch has no NCCL backend";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to libtorch";
  const auto path = std::filesystem::temp_directory_path() / "gpufleet_nccl_test_store";
  std::filesystem::remove(path);
  auto store = c10::make_intrusive<c10d::FileStore>(path.string(), 1);
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, 0, 1);
  std::vector<at::Tensor> tensors{torch::arange(8, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA))};
  group->allreduce(tensors)->wait();
  EXPECT_TRUE(torch::equal(tensors[0].cpu(), torch::arange(8, torch::kFloat32)));
  // Shut down while the store still exists: a group destroyed without it
  // (and after its store file is gone) waits out the store's timeout at exit.
  group->shutdown();
  group.reset();
  store.reset();
  std::filesystem::remove(path);
#endif
}

}  // namespace
