#include "common/cpu_isa.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "common/error.h"

namespace fleet {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

CpuIsa parse_cpu_isa(const std::string& name) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (name == cpu_isa_name(isa)) return isa;
  throw UsageError(std::string(kCpuIsaEnvVar) + " must be portable, avx2 or avx512, not '" + name + "'");
}

CpuIsa detected_cpu_isa() {
#if defined(__x86_64__)
  static const CpuIsa isa = !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? CpuIsa::kPortable
                            : __builtin_cpu_supports("avx512f")                                ? CpuIsa::kAvx512
                                                                                               : CpuIsa::kAvx2;
  return isa;
#else
  return CpuIsa::kPortable;
#endif
}

CpuIsa capped_cpu_isa(CpuIsa detected, const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return detected;
  return std::min(detected, parse_cpu_isa(env_value));
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = capped_cpu_isa(detected_cpu_isa(), std::getenv(kCpuIsaEnvVar));
  return isa;
}

CpuIsa blas_isa_of_core(const char* core, CpuIsa detected) {
  if (core == nullptr) return detected;
  std::string name(core);
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* wide : {"skylakex", "cooperlake", "sapphirerapids"})
    if (name == wide) return CpuIsa::kAvx512;
  for (const char* avx2 : {"haswell", "zen"})
    if (name == avx2) return CpuIsa::kAvx2;
  return detected;
}

CpuIsa blas_cpu_isa() {
  static const CpuIsa isa = [] {
    using CoreName = char* (*)();
    auto* core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    return blas_isa_of_core(core_name ? core_name() : nullptr, detected_cpu_isa());
  }();
  return isa;
}

}  // namespace fleet
