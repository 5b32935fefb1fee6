#include "orion/kernel_profile.h"

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "common/atomic_file.h"
#include "common/csv.h"
#include "common/error.h"
#include "common/file_io.h"

namespace fleet::orion {

const char* kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::kCompute:
      return "compute";
    case KernelClass::kMemory:
      return "memory";
    case KernelClass::kUnknown:
      return "unknown";
  }
  return "?";
}

double KernelProfile::total_duration_ns() const {
  double total = 0;
  for (const auto& k : kernels) total += k.duration_ns;
  return total;
}

std::optional<std::string> kernel_record_problem(const KernelRecord& k) {
  // A kernel runs for nanoseconds to seconds; over 1000 s (1e12 ns) is a unit error, not a kernel.
  if (!(k.duration_ns >= 0 && k.duration_ns <= kMaxKernelDurationNs))
    return fmt::format("duration {} ns is outside 0 to 1e12 ns (1000 s): a unit error?", k.duration_ns);
  if (k.sm_usage < 0) return "SM usage cannot be negative";
  if (k.memory_footprint < 0) return "memory footprint cannot be negative";
  return std::nullopt;
}

KernelProfile read_kernel_profile(const std::filesystem::path& path) {
  const CsvTable table = CsvTable::read(path, kMaxProfileBytes, kMaxProfileKernels);
  const std::size_t name = table.require_column("Name");
  const std::size_t profile = table.require_column("Profile");
  const std::size_t footprint = table.require_column("Memory_footprint");
  const std::size_t sms = table.require_column("SM_usage");
  const std::size_t duration = table.require_column("Duration");
  auto optional = [&](const char* column) { return table.column(column); };
  const auto grid = optional("Grid"), block = optional("Block"), regs = optional("Registers");
  const auto static_smem = optional("Static_shmem"), dynamic_smem = optional("Dynamic_shmem");
  const auto flops = optional("FLOPs"), dram = optional("DRAM_bytes"), device = optional("Device");

  KernelProfile out;
  out.source = path.string();
  // One rule for every reader (simulate, exec, summarize): a profile lists kernels.
  if (table.rows() == 0)
    throw InputError("the profile lists no kernels (only its header)", {path.string(), "", std::nullopt});
  out.kernels.reserve(table.rows());
  for (std::size_t r = 0; r < table.rows(); ++r) {
    KernelRecord k;
    k.name = table.at(r, name);
    const long long cls = table.integer(r, profile);
    if (cls < -1 || cls > 1) table.fail(r, profile, "profile must be 1 (compute), 0 (memory) or -1 (unknown)");
    k.profile = static_cast<KernelClass>(cls);
    k.memory_footprint = table.integer(r, footprint);
    if (k.memory_footprint < 0) table.fail(r, footprint, "memory footprint cannot be negative");
    k.sm_usage = table.integer(r, sms);
    if (k.sm_usage < 0) table.fail(r, sms, "SM usage cannot be negative");
    k.duration_ns = table.number(r, duration);
    if (const auto problem = kernel_record_problem(k)) table.fail(r, duration, *problem);
    auto int_or_zero = [&](const std::optional<std::size_t>& c, long long limit = 1ll << 53) -> long long {
      if (!c || table.at(r, *c).empty()) return 0;
      const long long v = table.integer(r, *c);
      if (v < 0) table.fail(r, *c, "cannot be negative");
      if (v > limit) table.fail(r, *c, "is beyond any GPU's limit (" + std::to_string(limit) + ")");
      return v;
    };
    auto num_or_unknown = [&](const std::optional<std::size_t>& c) -> double {
      return (!c || table.at(r, *c).empty()) ? -1.0 : table.number(r, *c);
    };
    k.grid_blocks = int_or_zero(grid);
    k.threads_per_block = static_cast<int>(int_or_zero(block, 1 << 20));
    k.registers_per_thread = static_cast<int>(int_or_zero(regs, 1 << 16));
    k.static_shared_bytes = int_or_zero(static_smem, 1ll << 30);
    k.dynamic_shared_bytes = int_or_zero(dynamic_smem, 1ll << 30);
    k.flops = num_or_unknown(flops);
    k.dram_bytes = num_or_unknown(dram);
    if (device) {
      // One GPU per profile: its durations were measured there.
      const std::string& given = table.at(r, *device);
      std::string canonical;
      if (!given.empty()) {
        try {
          canonical = device_by_name(given).name;
        } catch (const InputError& e) {
          table.fail(r, *device, e.message());
        }
      }
      if (r == 0)
        out.device = canonical;
      else if (canonical != out.device)
        table.fail(r, *device, "every kernel of a profile must come from one GPU ('" + out.device + "' above)");
    }
    out.kernels.push_back(std::move(k));
  }
  return out;
}

void write_kernel_profile(const std::filesystem::path& path, const KernelProfile& profile) {
  std::ostringstream out;
  out << "Name,Profile,Memory_footprint,SM_usage,Duration,Grid,Block,Registers,Static_shmem,Dynamic_shmem,FLOPs,"
         "DRAM_bytes,Device\n";
  auto opt_int = [](std::int64_t v) { return v > 0 ? std::to_string(v) : std::string(); };
  auto opt_num = [](double v) { return v >= 0 ? fmt::format("{}", v) : std::string(); };
  for (const KernelRecord& k : profile.kernels) {
    out << csv_escape(k.name) << ',' << static_cast<int>(k.profile) << ',' << k.memory_footprint << ',' << k.sm_usage
        << ',' << fmt::format("{}", k.duration_ns) << ',' << opt_int(k.grid_blocks) << ','
        << opt_int(k.threads_per_block) << ',' << opt_int(k.registers_per_thread) << ','
        << opt_int(k.static_shared_bytes) << ',' << opt_int(k.dynamic_shared_bytes) << ',' << opt_num(k.flops) << ','
        << opt_num(k.dram_bytes) << ',' << profile.device << '\n';
  }
  write_file_atomically(path, out.str());
}

KernelClass classify_by_roofline(double flops, double dram_bytes, const DeviceSpec& device) {
  if (flops < 0 || dram_bytes < 0) return KernelClass::kUnknown;
  if (dram_bytes == 0) return flops > 0 ? KernelClass::kCompute : KernelClass::kUnknown;
  return flops / dram_bytes >= device.ridge_point() ? KernelClass::kCompute : KernelClass::kMemory;
}

KernelClass classify_by_utilization(double sm_pct, double dram_pct, double min_pct) {
  if (std::isnan(sm_pct) || std::isnan(dram_pct)) return KernelClass::kUnknown;
  if (sm_pct < min_pct && dram_pct < min_pct) return KernelClass::kUnknown;
  return sm_pct >= dram_pct ? KernelClass::kCompute : KernelClass::kMemory;
}

}  // namespace fleet::orion
