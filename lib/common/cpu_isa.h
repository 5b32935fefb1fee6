// Which vector instruction set the CPU kernels use (the small-batch dense
// product, the SBMM kernels): the widest this CPU runs, unless the
// environment caps it. Results of those kernels depend on the width (each
// width adds in its own fixed order), so capping it makes runs on different
// CPUs comparable and lets a benchmark show what a CPU without AVX-512 gets.
#pragma once

#include <string>

namespace fleet {

enum class CpuIsa { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

/// Environment variable that caps the kernels' instruction set.
inline constexpr const char* kCpuIsaEnvVar = "GPUFLEET_CPU_ISA";

/// "portable", "avx2" or "avx512".
const char* cpu_isa_name(CpuIsa isa);
/// Parses those names; UsageError naming the variable otherwise.
CpuIsa parse_cpu_isa(const std::string& name);
/// What this CPU runs: AVX2 means AVX2 and FMA, AVX-512 AVX-512F besides
/// (x86-64 only; elsewhere portable). Checked once.
CpuIsa detected_cpu_isa();
/// `detected` capped by an environment value (null: no cap). A value above
/// what the CPU runs does not raise it.
CpuIsa capped_cpu_isa(CpuIsa detected, const char* env_value);
/// The kernels' instruction set: detected_cpu_isa() capped by
/// GPUFLEET_CPU_ISA, read once. A bad value throws UsageError on every call;
/// every program checks it at start-up, so it stops there with one line.
CpuIsa cpu_isa();

/// The widest vectors of the BLAS library's float kernels, which decides up
/// to how many rows the CPU kernels beat its GEMM. OpenBLAS names the core it
/// chose its kernels for (openblas_get_corename, looked up at run time, so
/// nothing links OpenBLAS for it; OPENBLAS_CORETYPE changes the choice).
/// Without OpenBLAS, what the CPU runs. Not capped by GPUFLEET_CPU_ISA, which
/// caps this project's kernels only. Checked once.
CpuIsa blas_cpu_isa();
/// The instruction set of OpenBLAS's kernels for a core name (any case):
/// AVX-512 for SkylakeX, Cooperlake and SapphireRapids, AVX2 for Haswell and
/// Zen, `detected` for any other name or none.
CpuIsa blas_isa_of_core(const char* core, CpuIsa detected);

}  // namespace fleet
