// Per-kernel profiles: what each kernel of one request (or one training
// iteration) costs, in the CSV layout Orion uses, extended with launch data.
//
// Columns: Name,Profile,Memory_footprint,SM_usage,Duration — as Orion writes
// them (Profile 1 = compute-bound, 0 = memory-bound, -1 = unknown; SM_usage =
// SMs needed at full occupancy; Duration in ns) — then optionally Grid,Block,
// Registers,Static_shmem,Dynamic_shmem,FLOPs,DRAM_bytes (empty = unknown),
// and Device: the GPU the durations were measured on (every row the same;
// absent or empty in Orion's files, which do not record it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "orion/device_spec.h"

namespace fleet::orion {

/// Whether a kernel is limited by compute or by memory bandwidth.
enum class KernelClass : std::int8_t { kUnknown = -1, kMemory = 0, kCompute = 1 };

/// "compute", "memory" or "unknown".
const char* kernel_class_name(KernelClass c);

/// One kernel of a profile.
struct KernelRecord {
  std::string name;
  KernelClass profile = KernelClass::kUnknown;
  std::int64_t memory_footprint = 0;  ///< bytes (Orion writes 0 when not measured)
  std::int64_t sm_usage = 0;          ///< SMs needed at full occupancy
  double duration_ns = 0;             ///< measured alone
  // Launch and counter data; 0 / negative when unknown.
  std::int64_t grid_blocks = 0;
  int threads_per_block = 0;
  int registers_per_thread = 0;
  std::int64_t static_shared_bytes = 0;
  std::int64_t dynamic_shared_bytes = 0;
  double flops = -1;
  double dram_bytes = -1;
};

/// The kernels of one request or iteration, in launch order.
struct KernelProfile {
  std::string source;  ///< file it came from
  std::string device;  ///< canonical name of the GPU it was measured on; "" when not recorded
  std::vector<KernelRecord> kernels;

  /// Sum of durations in ns.
  double total_duration_ns() const;
};

/// Kernels one profile may hold: 200 times the largest of Orion's (BERT
/// training, 4777), and the bytes of its CSV (a profile's table takes about
/// 20 times its text in memory, so the cap bounds that too).
inline constexpr std::size_t kMaxProfileKernels = 1'000'000;
inline constexpr std::uintmax_t kMaxProfileBytes = 32ull << 20;

/// The longest kernel a profile may hold: 1000 s. Longer is a unit error.
inline constexpr double kMaxKernelDurationNs = 1e12;

/// What makes a record unfit for a profile (a duration outside [0,
/// kMaxKernelDurationNs], a negative SM usage or footprint), or nullopt:
/// the rule the reader applies, for writers to apply before writing.
std::optional<std::string> kernel_record_problem(const KernelRecord& record);

/// Reads Orion's CSV or our extended one; InputError naming line and column
/// for a malformed row, a missing column, a bad class or a negative value;
/// for a file over kMaxProfileBytes (before reading it) or a table over
/// kMaxProfileKernels.
KernelProfile read_kernel_profile(const std::filesystem::path& path);
/// Writes the extended CSV atomically.
void write_kernel_profile(const std::filesystem::path& path, const KernelProfile& profile);

/// Roofline: compute-bound when FLOPs per DRAM byte reach the device's ridge point.
KernelClass classify_by_roofline(double flops, double dram_bytes, const DeviceSpec& device);
/// Without FLOP counts: the larger of SM and DRAM throughput (% of peak)
/// decides; below `min_pct` for both, the kernel is latency-bound: unknown.
KernelClass classify_by_utilization(double sm_pct, double dram_pct, double min_pct = 30.0);

}  // namespace fleet::orion
