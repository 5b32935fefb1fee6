// Kernel activity captured from a real program (CUPTI, see
// lib/orion/live/cuda/capture_injection.cpp) -> a kernel profile. The
// records file is JSON lines, one object per record (docs/formats.md):
//   {"kind":"device","name":"NVIDIA H200","sms":132}
//   {"kind":"kernel","name":"_Z...","grid":[x,y,z],"block":[x,y,z],"registers":r,
//    "static_shared":b,"dynamic_shared":b,"start":ns,"end":ns,"stream":s}
//   {"kind":"marker","what":"begin"|"end","t":ns}   (cuProfilerStart / Stop)
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "orion/device_spec.h"
#include "orion/kernel_profile.h"

namespace fleet::orion {

/// One kernel execution.
struct CapturedKernel {
  std::string name;
  std::int64_t grid_blocks = 1;
  int threads_per_block = 1;
  int registers_per_thread = 0;
  std::int64_t static_shared_bytes = 0;
  std::int64_t dynamic_shared_bytes = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t stream = 0;
};

/// Everything one capture recorded.
struct CaptureRecords {
  std::string device_name;
  int device_sms = 0;
  std::vector<CapturedKernel> kernels;
  std::vector<std::pair<std::uint64_t, bool>> markers;  ///< (time, true = begin)
};

/// Reads a records file; InputError naming the line for malformed records.
CaptureRecords read_capture_records(const std::filesystem::path& path);

/// How records become a profile.
struct CaptureOptions {
  std::string device = "auto";               ///< a device name, or "auto": from the device record
  std::optional<std::filesystem::path> ncu;  ///< an ncu CSV export for the compute/memory class
  /// Marked iterations left out at the start (warm-up). Not given: the
  /// first one when there are several (a single one is used). Given: it
  /// must leave at least one (InputError otherwise).
  std::optional<int> skip;
};

/// The profile of one request/iteration: with markers, the marked
/// iterations after `skip` whose kernel sequence equals the last one's,
/// each kernel's duration the median over them; without markers, every
/// kernel once. SM need by lib/orion's occupancy rules, class from the ncu
/// export by kernel name (unknown without one). `summary` gets a line on
/// what was used. InputError when nothing is left.
KernelProfile profile_from_capture(const CaptureRecords& records, const CaptureOptions& options,
                                   std::string* summary = nullptr);

/// Marked iterations whose median time between their markers exceeds their
/// kernels' time by this factor are launch-bound (the CPU, not the GPU, sets
/// their pace: short kernels launched from Python).
inline constexpr double kLaunchBoundFactor = 1.5;

/// A launch-bound client's CPU time per kernel launch in microseconds, as the
/// simulator's launch_overhead_us models it: (median iteration time - its
/// last kernel) / kernels, from the iterations' times between markers
/// (`walls_ns`); nullopt when the iterations are not launch-bound.
/// profile_from_capture's summary reports it.
std::optional<double> launch_bound_overhead_us(const KernelProfile& profile, const std::vector<double>& walls_ns);

/// The device table for a CUPTI device name ("NVIDIA H200" -> h200); InputError if unknown.
const DeviceSpec& device_for_name(const std::string& cupti_name, int sms);

}  // namespace fleet::orion
