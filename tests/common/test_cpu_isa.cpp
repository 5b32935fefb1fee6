// The kernels' instruction set: names, the environment cap, bad values; the
// width of OpenBLAS's kernels.
#include <gtest/gtest.h>

#include "common/cpu_isa.h"
#include "common/error.h"

namespace fleet {
namespace {

TEST(CpuIsa, NamesRoundTrip) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512})
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa);
}

TEST(CpuIsa, TheEnvironmentCapsButNeverRaises) {
  EXPECT_EQ(capped_cpu_isa(CpuIsa::kAvx512, nullptr), CpuIsa::kAvx512);
  EXPECT_EQ(capped_cpu_isa(CpuIsa::kAvx512, ""), CpuIsa::kAvx512);
  EXPECT_EQ(capped_cpu_isa(CpuIsa::kAvx512, "avx2"), CpuIsa::kAvx2);
  EXPECT_EQ(capped_cpu_isa(CpuIsa::kAvx512, "portable"), CpuIsa::kPortable);
  EXPECT_EQ(capped_cpu_isa(CpuIsa::kAvx2, "avx512"), CpuIsa::kAvx2);
  EXPECT_EQ(capped_cpu_isa(CpuIsa::kPortable, "avx2"), CpuIsa::kPortable);
}

TEST(CpuIsa, ABadValueNamesTheVariable) {
  try {
    capped_cpu_isa(CpuIsa::kAvx2, "sse9");
    FAIL() << "accepted sse9";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("GPUFLEET_CPU_ISA must be portable, avx2 or avx512, not 'sse9'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_cpu_isa("AVX2"), UsageError);
}

// OpenBLAS's core names as openblas_get_corename() gives them; anything else
// (another BLAS, a core this list does not know) leaves what the CPU runs.
TEST(CpuIsa, BlasKernelWidthFollowsOpenBlasCoreName) {
  EXPECT_EQ(blas_isa_of_core("SkylakeX", CpuIsa::kAvx512), CpuIsa::kAvx512);
  EXPECT_EQ(blas_isa_of_core("Cooperlake", CpuIsa::kAvx512), CpuIsa::kAvx512);
  EXPECT_EQ(blas_isa_of_core("SAPPHIRERAPIDS", CpuIsa::kAvx512), CpuIsa::kAvx512);
  EXPECT_EQ(blas_isa_of_core("Haswell", CpuIsa::kAvx512), CpuIsa::kAvx2);  // OPENBLAS_CORETYPE=Haswell
  EXPECT_EQ(blas_isa_of_core("Zen", CpuIsa::kAvx2), CpuIsa::kAvx2);
  EXPECT_EQ(blas_isa_of_core("Prescott", CpuIsa::kAvx2), CpuIsa::kAvx2);
  EXPECT_EQ(blas_isa_of_core(nullptr, CpuIsa::kAvx512), CpuIsa::kAvx512);
}

}  // namespace
}  // namespace fleet
