// Linked into every libtorch test binary: all tests run on one CPU thread,
// BLAS pool included, so float sums happen in the same order on any machine
// (results then differ between CPUs only through their SIMD kernels).
#include <gtest/gtest.h>

#include "model/torch/cpu_threads.h"

namespace {

class OneCpuThread : public ::testing::Environment {
 public:
  void SetUp() override { fleet::model::set_cpu_threads(1); }
};

[[maybe_unused]] const auto* const kOneCpuThread = ::testing::AddGlobalTestEnvironment(new OneCpuThread);

}  // namespace
