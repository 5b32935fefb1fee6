#include "sailor/runtime/gpu_energy.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace fleet::sailor::runtime {

namespace {

// The few NVML entry points used, by their C signatures (nvml.h is not
// needed to build: the library is found at run time).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
using InitFn = NvmlReturn (*)();
using ShutdownFn = NvmlReturn (*)();
using ByIndexFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using ByUuidFn = NvmlReturn (*)(const char*, NvmlDevice*);
using EnergyFn = NvmlReturn (*)(NvmlDevice, unsigned long long*);  // millijoules

}  // namespace

struct GpuEnergyMeter::Api {
  void* library = nullptr;
  ShutdownFn shutdown = nullptr;
  EnergyFn energy = nullptr;
  NvmlDevice device = nullptr;
  ~Api() {
    if (shutdown != nullptr) shutdown();
    if (library != nullptr) dlclose(library);
  }
};

VisibleDevice first_visible_device(const char* value) {
  VisibleDevice d;
  if (value == nullptr) return d;
  std::string first(value);
  first = first.substr(0, first.find(','));
  if (first.rfind("GPU-", 0) == 0) {
    d.uuid = first;
  } else if (!first.empty()) {
    char* end = nullptr;
    const long index = std::strtol(first.c_str(), &end, 10);
    if (end != first.c_str() && index >= 0 && index < 1024) d.index = static_cast<int>(index);
  }
  return d;
}

std::unique_ptr<GpuEnergyMeter> GpuEnergyMeter::open(std::string* why) {
  auto fail = [&](const std::string& reason) -> std::unique_ptr<GpuEnergyMeter> {
    if (why != nullptr) *why = reason;
    return nullptr;
  };
  auto api = std::make_unique<Api>();
  api->library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api->library == nullptr) return fail("NVML (libnvidia-ml.so.1) is not installed");
  auto init = reinterpret_cast<InitFn>(dlsym(api->library, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(api->library, "nvmlShutdown"));
  auto by_index = reinterpret_cast<ByIndexFn>(dlsym(api->library, "nvmlDeviceGetHandleByIndex_v2"));
  auto by_uuid = reinterpret_cast<ByUuidFn>(dlsym(api->library, "nvmlDeviceGetHandleByUUID"));
  api->energy = reinterpret_cast<EnergyFn>(dlsym(api->library, "nvmlDeviceGetTotalEnergyConsumption"));
  if (init == nullptr || shutdown == nullptr || by_index == nullptr || by_uuid == nullptr || api->energy == nullptr)
    return fail("NVML lacks the energy counter");
  if (init() != kNvmlSuccess) return fail("NVML did not initialise (no NVIDIA driver?)");
  api->shutdown = shutdown;
  const VisibleDevice visible = first_visible_device(std::getenv("CUDA_VISIBLE_DEVICES"));
  const NvmlReturn found = visible.uuid.empty() ? by_index(static_cast<unsigned int>(visible.index), &api->device)
                                                : by_uuid(visible.uuid.c_str(), &api->device);
  if (found != kNvmlSuccess) return fail("NVML does not know the GPU CUDA_VISIBLE_DEVICES names");
  unsigned long long millijoules = 0;
  if (api->energy(api->device, &millijoules) != kNvmlSuccess)
    return fail("this GPU has no energy counter (NVML needs Volta or newer)");
  return std::unique_ptr<GpuEnergyMeter>(new GpuEnergyMeter(std::move(api)));
}

GpuEnergyMeter::GpuEnergyMeter(std::unique_ptr<Api> api) : api_(std::move(api)) {}
GpuEnergyMeter::~GpuEnergyMeter() = default;

std::optional<double> GpuEnergyMeter::total_joules() const {
  unsigned long long millijoules = 0;
  if (api_->energy(api_->device, &millijoules) != kNvmlSuccess) return std::nullopt;
  return static_cast<double>(millijoules) / 1e3;
}

}  // namespace fleet::sailor::runtime
