// dz-serve on a GPU (labelled gpu; skipped without one): the base, the KV
// cache and the deltas in GPU memory, the delta products by the CUDA SBMM
// kernel on PyTorch's stream. A mixed batch gives the CPU's logits, and the
// engine gives the CPU engine's greedy tokens in delta and swap mode.
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "deltazip/container.h"
#include "deltazip/serve/torch/device_reconstruct.h"
#include "deltazip/serve/torch/engine.h"
#include "deltazip/serve/torch/variant_delta.h"
#include "deltazip/torch/delta_compressor.h"
#include "deltazip/torch/reconstruct.h"
#include "model/torch/llama.h"
#include "serving_fixture.h"

namespace fleet::deltazip {
namespace {

using model::LlamaModel;

class ServingGpu : public Serving {
 protected:
  static void SetUpTestSuite() {  // no models to build where every test skips
    if (torch::cuda::is_available()) Serving::SetUpTestSuite();
  }
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "libtorch sees no GPU";
  }
};

// A mixed batch of `first` and `second` (containers) on the GPU against the CPU.
void expect_gpu_batch_equals_cpu(const std::filesystem::path& first, const std::filesystem::path& second,
                                 const std::filesystem::path& base_folder) {
  torch::NoGradGuard no_grad;
  const torch::Device gpu(torch::kCUDA);
  auto cpu_base = LlamaModel::load(base_folder);
  auto gpu_base = LlamaModel::load(base_folder, torch::kFloat32, gpu);
  DeltaReader r1(first), r2(second);
  auto c1 = VariantDelta::load("ft1", r1, cpu_base), c2 = VariantDelta::load("ft2", r2, cpu_base);
  auto g1 = VariantDelta::load("ft1", r1, gpu_base), g2 = VariantDelta::load("ft2", r2, gpu_base);
  ASSERT_TRUE(g1->linear.empty());
  ASSERT_EQ(g1->device_linear.size(), c1->linear.size());
  EXPECT_EQ(g1->bytes, c1->bytes);
  // Rows: ft1 x2, base, ft2 x9 (more rows than one pass of the CUDA kernel).
  auto tokens = torch::randint(4, 260, {12, 9}, torch::kInt64);
  std::vector<std::int64_t> counts(12, 9), slots(12);
  for (std::int64_t i = 0; i < 12; ++i)
    slots[static_cast<std::size_t>(i)] = i, counts[static_cast<std::size_t>(i)] = 3 + i % 7;
  model::KvCache cpu_cache(cpu_base.config(), 12, 32, torch::kFloat32);
  model::KvCache gpu_cache(gpu_base.config(), 12, 32, torch::kFloat32, gpu);
  DeltaOverlay on_cpu({{0, 2, c1.get()}, {2, 1, nullptr}, {3, 9, c2.get()}}, 12);
  DeltaOverlay on_gpu({{0, 2, g1.get()}, {2, 1, nullptr}, {3, 9, g2.get()}}, 12);
  auto want = cpu_base.forward_cached(cpu_cache, slots, tokens, counts, true, &on_cpu);
  auto got = gpu_base.forward_cached(gpu_cache, slots, tokens.to(gpu), counts, true, &on_gpu).cpu();
  for (std::int64_t b = 0; b < 12; ++b) {
    const auto n = counts[static_cast<std::size_t>(b)];
    auto g = got[b].narrow(0, 0, n), w = want[b].narrow(0, 0, n);
    EXPECT_TRUE(torch::allclose(g, w, 1e-3, 1e-3))
        << "row " << b << ": max difference " << (g - w).abs().max().item<float>();
  }
  // A decode step (one token per row) on top of the prefilled caches.
  auto next = torch::randint(4, 260, {12, 1}, torch::kInt64);
  const std::vector<std::int64_t> ones(12, 1);
  auto step_want = cpu_base.forward_cached(cpu_cache, slots, next, ones, false, &on_cpu);
  auto step_got = gpu_base.forward_cached(gpu_cache, slots, next.to(gpu), ones, false, &on_gpu).cpu();
  EXPECT_TRUE(torch::allclose(step_got, step_want, 1e-3, 1e-3))
      << "decode step: max difference " << (step_got - step_want).abs().max().item<float>();
}

TEST_F(ServingGpu, MixedBatchLogitsEqualTheCpuOnes) {
  expect_gpu_batch_equals_cpu(path("ft1.h5"), path("ft2.h5"), path("base"));
}

// Low-rank deltas: two grouped launches per layer (down factors, then up
// factors beside the full-rank variant's products).
TEST_F(ServingGpu, LowRankMixedBatchLogitsEqualTheCpuOnes) {
  CompressCommand c = quick_compression("ft1", "ft1-rank-gpu.h5");
  c.sparsity = "none";
  c.rank = 6;
  compress_delta(c);
  expect_gpu_batch_equals_cpu(path("ft1-rank-gpu.h5"), path("ft2.h5"), path("base"));
  // Rebuilt on the GPU (swap and full mode): the factors' product there.
  torch::NoGradGuard no_grad;
  DeltaReader reader(path("ft1-rank-gpu.h5"));
  const auto want = reconstruct_model(reader, LlamaModel::load(path("base")));
  const auto got = reconstruct_on_base_device(reader, LlamaModel::load(path("base"), torch::kFloat32, torch::kCUDA));
  std::map<std::string, torch::Tensor> wanted;
  for (const auto& [name, t] : want.named_parameters()) wanted[name] = t;
  for (const auto& [name, t] : got.named_parameters())
    EXPECT_TRUE(torch::allclose(t.cpu(), wanted.at(name), 1e-5, 1e-6)) << name;
}

TEST_F(ServingGpu, ModelRebuiltOnTheGpuEqualsTheCpuRebuild) {
  // What swap and full mode keep resident on a GPU: decoded there from the
  // packed delta, never through the host; the same floats as the CPU's.
  torch::NoGradGuard no_grad;
  const torch::Device gpu(torch::kCUDA);
  auto cpu_base = LlamaModel::load(path("base"));
  auto gpu_base = LlamaModel::load(path("base"), torch::kFloat32, gpu);
  for (const char* file : {"ft1.h5", "ft2.h5"}) {
    DeltaReader reader(path(file));
    const auto want = reconstruct_model(reader, cpu_base);
    const auto got = reconstruct_on_base_device(reader, gpu_base);
    EXPECT_TRUE(got.device().is_cuda()) << file;
    std::map<std::string, torch::Tensor> wanted;
    for (const auto& [name, t] : want.named_parameters()) wanted[name] = t;
    std::size_t compared = 0;
    for (const auto& [name, t] : got.named_parameters()) {
      ASSERT_TRUE(wanted.count(name)) << file << ": " << name;
      EXPECT_TRUE(torch::equal(t.cpu(), wanted.at(name)))
          << file << ": " << name << ", max difference " << (t.cpu() - wanted.at(name)).abs().max().item<float>();
      ++compared;
    }
    EXPECT_EQ(compared, wanted.size()) << file;
  }
}

class ServingGpuModes : public ServingGpu, public ::testing::WithParamInterface<ServeMode> {};

TEST_P(ServingGpuModes, GreedyTokensEqualTheCpuEngines) {
  auto run = [&](const std::string& device) {
    auto o = options(GetParam());
    o.device = device;
    Engine engine(o);
    engine.add_variant("ft1", path("ft1.h5"));
    engine.add_variant("ft2", path("ft2.h5"));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (std::size_t i = 0; i < 9; ++i) streams.push_back(engine.submit(request(i)));
    std::vector<std::vector<std::int64_t>> out;
    for (auto& s : streams) out.push_back(collect(s));
    return out;
  };
  const auto gpu = run("cuda"), cpu = run("cpu");
  ASSERT_EQ(gpu.size(), cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) EXPECT_EQ(gpu[i], cpu[i]) << "request " << i;
}

INSTANTIATE_TEST_SUITE_P(Modes, ServingGpuModes, ::testing::Values(ServeMode::kDelta, ServeMode::kSwap),
                         [](const ::testing::TestParamInfo<ServeMode>& info) { return serve_mode_name(info.param); });

}  // namespace
}  // namespace fleet::deltazip
