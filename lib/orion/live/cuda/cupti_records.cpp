#include "orion/live/cuda/cupti_records.h"

#include <cstdio>

namespace fleet::orion::live {
namespace {

// JSON string escaping for kernel names (mangled names are ASCII, but a
// record must never produce an invalid line).
std::string quoted(const char* s) {
  std::string out = "\"";
  for (const char* p = s != nullptr ? s : ""; *p != '\0'; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string kernel_record_line(const CuptiKernelRecord& k) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                ",\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"registers\":%u,\"static_shared\":%d,"
                "\"dynamic_shared\":%d,\"start\":%llu,\"end\":%llu,\"stream\":%u}",
                k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, static_cast<unsigned>(k.registersPerThread),
                k.staticSharedMemory, k.dynamicSharedMemory, static_cast<unsigned long long>(k.start),
                static_cast<unsigned long long>(k.end), k.streamId);
  return "{\"kind\":\"kernel\",\"name\":" + quoted(k.name) + buffer;
}

std::string device_record_line(const CuptiDeviceRecord& d) {
  char buffer[128];
  std::snprintf(buffer, sizeof buffer, ",\"sms\":%u,\"cc\":%u%u}", d.numMultiprocessors, d.computeCapabilityMajor,
                d.computeCapabilityMinor);
  return "{\"kind\":\"device\",\"name\":" + quoted(d.name) + buffer;
}

std::string marker_line(std::uint64_t t, bool begin) {
  return "{\"kind\":\"marker\",\"what\":\"" + std::string(begin ? "begin" : "end") + "\",\"t\":" + std::to_string(t) +
         "}";
}

}  // namespace fleet::orion::live
