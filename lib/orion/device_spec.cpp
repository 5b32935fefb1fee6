#include "orion/device_spec.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace fleet::orion {

namespace {

DeviceSpec make_volta() {
  DeviceSpec d;
  d.name = "v100-16";
  d.description = "NVIDIA Tesla V100-SXM2-16GB";
  d.compute_capability = 70;
  d.sm_count = 80;
  d.shared_memory_per_sm = 96 * 1024;
  d.max_shared_memory_per_block = 96 * 1024;
  d.shared_memory_alloc_unit = 256;
  d.reserved_shared_memory_per_block = 0;
  d.peak_fp32_flops = 15.7e12;
  d.peak_tensor_flops = 125e12;
  d.memory_bandwidth = 900e9;
  d.memory_bytes = 16ull << 30;
  return d;
}

// Ampere (sm_80) and Hopper (sm_90) share the per-SM thread, warp, block and
// register limits and the 1 KiB per-block shared-memory reservation.
struct SmLayout {
  int compute_capability, sm_count, shared_per_sm_kib, max_shared_per_block_kib;
  double fp32, tensor;
};
constexpr SmLayout kAmpere{80, 108, 164, 163, 19.5e12, 312e12};
constexpr SmLayout kHopper{90, 132, 228, 227, 66.9e12, 989e12};

DeviceSpec make_modern(const SmLayout& sm, const std::string& name, const std::string& description, double bandwidth,
                       std::uint64_t memory) {
  DeviceSpec d;
  d.name = name;
  d.description = description;
  d.compute_capability = sm.compute_capability;
  d.sm_count = sm.sm_count;
  d.shared_memory_per_sm = sm.shared_per_sm_kib * 1024;
  d.max_shared_memory_per_block = sm.max_shared_per_block_kib * 1024;
  d.shared_memory_alloc_unit = 128;
  d.reserved_shared_memory_per_block = 1024;
  d.peak_fp32_flops = sm.fp32;
  d.peak_tensor_flops = sm.tensor;
  d.memory_bandwidth = bandwidth;
  d.memory_bytes = memory;
  return d;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

const std::vector<DeviceSpec>& known_devices() {
  static const std::vector<DeviceSpec> devices = {
      make_volta(),
      make_modern(kAmpere, "a100-40", "NVIDIA A100-SXM4-40GB", 1555e9, 40ull << 30),
      make_modern(kAmpere, "a100-80", "NVIDIA A100-SXM4-80GB", 2039e9, 80ull << 30),
      make_modern(kHopper, "h100", "NVIDIA H100 SXM5 80GB", 3.35e12, 80ull << 30),
      make_modern(kHopper, "h200", "NVIDIA H200 SXM 141GB", 4.8e12, 141ull << 30),
  };
  return devices;
}

const DeviceSpec& device_by_name(std::string_view name) {
  std::string key = lower(name);
  if (key == "v100" || key == "v100-16gb") key = "v100-16";
  if (key == "a100" || key == "a100-40gb") key = "a100-40";
  if (key == "a100-80gb") key = "a100-80";
  if (key == "h100-80" || key == "h100-sxm") key = "h100";
  if (key == "h200-141") key = "h200";
  for (const DeviceSpec& d : known_devices()) {
    if (d.name == key) return d;
  }
  std::string names;
  for (const DeviceSpec& d : known_devices()) names += (names.empty() ? "" : ", ") + d.name;
  throw InputError("unknown device '" + std::string(name) + "' (known: " + names + ")");
}

}  // namespace fleet::orion
