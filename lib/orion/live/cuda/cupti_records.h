// CUPTI activity records -> the JSON lines of the capture records file
// (lib/orion/capture.h). Separate from the injection library so tests can
// run the conversion on constructed records without CUPTI or a GPU.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <string>

namespace fleet::orion::live {

/// The kernel record struct of the CUPTI version we compile against.
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
using CuptiKernelRecord = CUpti_ActivityKernel10;
#else
using CuptiKernelRecord = CUpti_ActivityKernel9;
#endif
using CuptiDeviceRecord = CUpti_ActivityDevice5;

/// One JSON line (no newline) for a kernel record.
std::string kernel_record_line(const CuptiKernelRecord& k);
/// One JSON line for a device record.
std::string device_record_line(const CuptiDeviceRecord& d);
/// One JSON line for a cuProfilerStart (begin) / cuProfilerStop marker at `t` ns.
std::string marker_line(std::uint64_t t, bool begin);

}  // namespace fleet::orion::live
