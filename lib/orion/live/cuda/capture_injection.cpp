// liborion_capture.so: the CUDA driver loads it into a program started by
// `orion-profile capture` (CUDA_INJECTION64_PATH) and calls
// InitializeInjection before the first CUDA call. It records every kernel
// execution with CUPTI's activity API (concurrent-kernel records, so the
// program's concurrency is not serialised), the device, and the
// cuProfilerStart/Stop markers that delimit iterations, and writes them as
// JSON lines to $ORION_CAPTURE_OUT when the program exits.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "orion/live/cuda/cupti_records.h"

namespace {

constexpr std::size_t kBufferBytes = 8 << 20;
constexpr std::size_t kAlignment = 8;

std::mutex g_mutex;
std::vector<std::string>* g_lines = nullptr;  // leaked: used from atexit and CUPTI threads

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, kBufferBytes));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<std::string> lines;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      lines.push_back(fleet::orion::live::kernel_record_line(
          *reinterpret_cast<const fleet::orion::live::CuptiKernelRecord*>(record)));
    } else if (record->kind == CUPTI_ACTIVITY_KIND_DEVICE) {
      lines.push_back(fleet::orion::live::device_record_line(
          *reinterpret_cast<const fleet::orion::live::CuptiDeviceRecord*>(record)));
    }
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_lines->insert(g_lines->end(), lines.begin(), lines.end());
}

void CUPTIAPI on_driver_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || info->callbackSite != CUPTI_API_ENTER) return;
  const bool begin = id == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart;
  if (!begin && id != CUPTI_DRIVER_TRACE_CBID_cuProfilerStop) return;
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_lines->push_back(fleet::orion::live::marker_line(t, begin));
}

void write_records() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("ORION_CAPTURE_OUT");
  if (path == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string tmp = std::string(path) + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "orion capture: cannot write %s\n", tmp.c_str());
    return;
  }
  for (const std::string& line : *g_lines) std::fprintf(f, "%s\n", line.c_str());
  if (std::fclose(f) == 0) std::rename(tmp.c_str(), path);
}

bool ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::fprintf(stderr, "orion capture: %s failed: %s\n", what, text != nullptr ? text : "?");
  return false;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  g_lines = new std::vector<std::string>();
  if (!ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks"))
    return 0;
  if (!ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records")) return 0;
  ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DEVICE), "enabling device records");
  CUpti_SubscriberHandle subscriber{};
  if (ok(cuptiSubscribe(&subscriber, on_driver_call, nullptr), "cuptiSubscribe")) {
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart);
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop);
  }
  std::atexit(write_records);
  return 1;
}
