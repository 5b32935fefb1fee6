// Label gpu: the CUDA SBMM kernel against the CPU kernel, and its decoding
// into a dense matrix against the CPU's, on every packed form; skips where
// no GPU is visible.
#include <iterator>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "deltazip/sbmm/cuda/sbmm_cuda.h"
#include "deltazip/sbmm/sbmm.h"

namespace fleet::deltazip {
namespace {

PackedMatrix random_form(std::int64_t rows, std::int64_t cols, int bits, const std::string& sparsity,
                         std::int64_t group_size, bool codebook, std::mt19937& rng) {
  const auto pattern = SparsityPattern::parse(sparsity);
  const std::int64_t group = group_size <= 0 ? cols : group_size, groups = (cols + group - 1) / group;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols)), kept(codes.size(), 1);
  for (auto& q : codes) q = static_cast<std::uint8_t>(rng() % (1u << bits));
  if (pattern.kind == SparsityPattern::Kind::kNOfM) {
    for (std::size_t g = 0; g < kept.size(); g += static_cast<std::size_t>(pattern.m)) {
      std::vector<int> order(static_cast<std::size_t>(pattern.m));
      for (int k = 0; k < pattern.m; ++k) order[static_cast<std::size_t>(k)] = k;
      std::shuffle(order.begin(), order.end(), rng);
      for (int k = 0; k < pattern.n; ++k) kept[g + static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = 0;
    }
  } else if (pattern.kind == SparsityPattern::Kind::kUnstructured) {
    for (auto& k : kept) k = (rng() % 1000) >= pattern.fraction * 1000;
  }
  if (codebook) {
    std::vector<std::uint16_t> levels(static_cast<std::size_t>(rows * groups) << bits);
    for (auto& v : levels) v = float_to_f16(static_cast<float>(rng() % 2001) * 1e-4f - 0.1f);
    return pack_matrix(rows, cols, bits, group_size, pattern, codes, kept, {}, {}, std::move(levels));
  }
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(rows * groups));
  std::vector<std::uint8_t> zeros(scales.size());
  for (std::size_t i = 0; i < scales.size(); ++i) {
    scales[i] = float_to_f16(0.001f + static_cast<float>(rng() % 1000) * 5e-5f);
    zeros[i] = bits == 1 ? 0 : static_cast<std::uint8_t>(rng() % (1u << bits));  // 1 bit: the sign grid
  }
  return pack_matrix(rows, cols, bits, group_size, pattern, codes, kept, std::move(scales), std::move(zeros));
}

// Every packed form: bit widths, n:m and unstructured sparsity, per-row and
// per-group scales, codebooks.
struct Form {
  int bits;
  const char* sparsity;
  std::int64_t group;
  bool codebook = false;
};
const Form kForms[] = {{4, "2:4", -1},       {2, "2:4", -1},        {3, "2:4", -1},      {8, "none", -1},
                       {4, "4:8", 64},       {3, "0.5", -1},        {2, "none", 128},    {1, "none", -1},
                       {2, "2:4", -1, true}, {1, "none", 64, true}, {3, "0.5", -1, true}};

TEST(SbmmGpu, EqualsTheCpuKernelOnEveryForm) {
  std::string why;
  if (!sbmm_cuda_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(3);
  for (const Form& f : kForms)
    for (std::int64_t n : {1, 3, 8, 13}) {
      const SbmmMatrix cpu(random_form(200, 512, f.bits, f.sparsity, f.group, f.codebook, rng));
      const SbmmCudaMatrix gpu(cpu.layout());
      std::normal_distribution<float> normal;
      std::vector<float> x(static_cast<std::size_t>(n * 512)), y_cpu(static_cast<std::size_t>(n * 200), 0.25f);
      for (auto& v : x) v = normal(rng);
      auto y_gpu = y_cpu;
      cpu.multiply_add(x.data(), n, 512, y_cpu.data(), 200, 0, 200);
      gpu.multiply_add_host(x.data(), n, y_gpu.data());
      for (std::size_t i = 0; i < y_cpu.size(); ++i)
        ASSERT_NEAR(y_gpu[i], y_cpu[i], 1e-4f * (1.0f + std::abs(y_cpu[i])))
            << f.bits << "-bit " << f.sparsity << " group " << f.group << (f.codebook ? " codebook" : "") << ", " << n
            << " rows, element " << i;
    }
}

TEST(SbmmGpu, GroupedLaunchEqualsOneLaunchPerProductToTheBit) {
  std::string why;
  if (!sbmm_cuda_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(7);
  // 20 products (two launches of at most 16) of every form, matrices of
  // different heights, 0 to 20 input rows (more than one pass of 8).
  std::vector<std::unique_ptr<SbmmCudaMatrix>> matrices;
  std::vector<std::vector<float>> xs, grouped, single;
  std::vector<SbmmCudaProduct> products;
  const std::int64_t cols = 256, counts[] = {1, 3, 8, 13, 0, 20, 2};
  for (int i = 0; i < 20; ++i) {
    const Form& f = kForms[static_cast<std::size_t>(i) % std::size(kForms)];
    const std::int64_t rows = 40 + 23 * i, n = counts[i % 7];
    const SbmmMatrix cpu(random_form(rows, cols, f.bits, f.sparsity, f.group, f.codebook, rng));
    matrices.push_back(std::make_unique<SbmmCudaMatrix>(cpu.layout()));
    std::normal_distribution<float> normal;
    xs.emplace_back(static_cast<std::size_t>(n * cols));
    for (auto& v : xs.back()) v = normal(rng);
    grouped.emplace_back(static_cast<std::size_t>(n * rows), 0.5f);
    single.push_back(grouped.back());
  }
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    const auto n = static_cast<std::int64_t>(xs[i].size()) / cols;
    products.push_back({matrices[i].get(), xs[i].data(), n, grouped[i].data()});
    if (n > 0) matrices[i]->multiply_add_host(xs[i].data(), n, single[i].data());  // (nothing to add for 0 rows)
  }
  sbmm_cuda_grouped_host(products.data(), products.size());
  for (std::size_t i = 0; i < matrices.size(); ++i) ASSERT_EQ(grouped[i], single[i]) << "product " << i;
}

TEST(SbmmGpu, AddToEqualsBasePlusTheCpuDecodingToTheBit) {
  std::string why;
  if (!sbmm_cuda_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(5);
  for (const Form& f : kForms) {
    const auto packed = random_form(130, 448, f.bits, f.sparsity, f.group, f.codebook, rng);
    std::vector<float> delta(static_cast<std::size_t>(130 * 448));
    unpack_matrix(packed, delta);
    std::normal_distribution<float> normal;
    std::vector<float> base(delta.size()), want(delta.size());
    for (auto& v : base) v = normal(rng);
    for (std::size_t i = 0; i < base.size(); ++i) want[i] = base[i] + delta[i];  // what the CPU rebuild computes
    const SbmmMatrix cpu(packed);
    const SbmmCudaMatrix gpu(cpu.layout());
    auto got = base;
    gpu.add_to_host(got.data());
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << f.bits << "-bit " << f.sparsity << " group " << f.group
                                 << (f.codebook ? " codebook" : "") << ", element " << i;
  }
}

}  // namespace
}  // namespace fleet::deltazip
