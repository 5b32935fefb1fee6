#include "sailor/gpu_power.h"

#include <array>
#include <string_view>

namespace fleet::sailor {

namespace {

struct Entry {
  std::string_view name;
  GpuPower power;
};

// Busy: the SXM board's maximum power from NVIDIA's data sheets (A100: 400 W;
// V100 SXM2: 300 W; H100 SXM5 and H200 SXM: 700 W; GH200: the module's
// configurable 450-1000 W, here its top, since the module is what is rented).
// Idle: vendors publish none; these are typical nvidia-smi readings of an
// idle board holding a CUDA context (about 10-15 % of the limit). Measured
// figures belong in cluster.json (docs/sailor-model.md, "Energy").
constexpr std::array<Entry, 8> kDefaults{{
    {"A100-40", {55, 400}},
    {"A100-80", {60, 400}},
    {"V100-16", {40, 300}},
    {"V100-32", {40, 300}},
    {"H100", {70, 700}},
    {"H200", {75, 700}},
    {"GH200", {120, 1000}},
    {"GH-96", {120, 1000}},
}};

}  // namespace

std::optional<GpuPower> default_gpu_power(const std::string& gpu_type) {
  for (const Entry& e : kDefaults) {
    if (e.name == gpu_type) return e.power;
  }
  return std::nullopt;
}

}  // namespace fleet::sailor
