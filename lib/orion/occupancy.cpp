#include "orion/occupancy.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"

namespace fleet::orion {

namespace {

std::int64_t round_up(std::int64_t value, std::int64_t unit) {
  return unit <= 0 ? value : (value + unit - 1) / unit * unit;
}

// What one block of a launch takes of an SM, as the hardware allocates it.
struct BlockNeeds {
  int warps;                   // threads rounded up to whole warps
  std::int64_t regs_per_warp;  // per-warp allocation in units of register_alloc_unit; 0 when unknown
  std::int64_t shared;         // static + dynamic + the runtime's reservation, rounded to the allocation unit
};

BlockNeeds block_needs(const LaunchConfig& launch, const DeviceSpec& device) {
  BlockNeeds b;
  b.warps = (launch.threads_per_block + device.warp_size - 1) / device.warp_size;
  b.regs_per_warp = launch.registers_per_thread <= 0
                        ? 0
                        : round_up(static_cast<std::int64_t>(launch.registers_per_thread) * device.warp_size,
                                   device.register_alloc_unit);
  b.shared =
      round_up(launch.static_shared_bytes + launch.dynamic_shared_bytes + device.reserved_shared_memory_per_block,
               device.shared_memory_alloc_unit);
  return b;
}

}  // namespace

std::string_view limiter_name(OccupancyLimiter limiter) {
  switch (limiter) {
    case OccupancyLimiter::kBlocks:
      return "blocks";
    case OccupancyLimiter::kThreads:
      return "threads";
    case OccupancyLimiter::kRegisters:
      return "registers";
    case OccupancyLimiter::kSharedMemory:
      return "shared memory";
  }
  return "?";
}

Occupancy compute_occupancy(const LaunchConfig& launch, const DeviceSpec& device) {
  if (launch.grid_blocks <= 0) throw InputError("grid must have at least one block");
  if (launch.threads_per_block <= 0 || launch.threads_per_block > device.max_threads_per_block) {
    throw InputError("block of " + std::to_string(launch.threads_per_block) + " threads is outside 1.." +
                     std::to_string(device.max_threads_per_block) + " on " + device.name);
  }
  if (launch.registers_per_thread < 0 || launch.registers_per_thread > device.max_registers_per_thread) {
    throw InputError(std::to_string(launch.registers_per_thread) + " registers per thread exceeds the limit of " +
                     std::to_string(device.max_registers_per_thread));
  }
  const std::int64_t requested_shared = launch.static_shared_bytes + launch.dynamic_shared_bytes;
  if (launch.static_shared_bytes < 0 || launch.dynamic_shared_bytes < 0)
    throw InputError("negative shared memory size");
  if (requested_shared > device.max_shared_memory_per_block) {
    throw InputError(std::to_string(requested_shared) + " bytes of shared memory per block exceed the " +
                     std::to_string(device.max_shared_memory_per_block) + "-byte limit of " + device.name);
  }

  const BlockNeeds block = block_needs(launch, device);
  const int warps_per_block = block.warps;
  struct Limit {
    int blocks;
    OccupancyLimiter limiter;
  };
  std::vector<Limit> limits;
  limits.push_back({device.max_blocks_per_sm, OccupancyLimiter::kBlocks});
  limits.push_back({std::min(device.max_warps_per_sm / warps_per_block,
                             device.max_threads_per_sm / (warps_per_block * device.warp_size)),
                    OccupancyLimiter::kThreads});
  if (block.regs_per_warp > 0) {
    const std::int64_t warps_by_registers = device.registers_per_sm / block.regs_per_warp;
    limits.push_back({static_cast<int>(warps_by_registers / warps_per_block), OccupancyLimiter::kRegisters});
  }
  if (block.shared > 0) {
    limits.push_back({static_cast<int>(device.shared_memory_per_sm / block.shared), OccupancyLimiter::kSharedMemory});
  }

  Occupancy out;
  out.blocks_per_sm = limits.front().blocks;
  out.limiter = limits.front().limiter;
  for (const Limit& l : limits) {
    if (l.blocks < out.blocks_per_sm) {
      out.blocks_per_sm = l.blocks;
      out.limiter = l.limiter;
    }
  }
  if (out.blocks_per_sm <= 0) {
    throw InputError("launch cannot fit one block on an SM of " + device.name + " (limited by " +
                     std::string(limiter_name(out.limiter)) + ")");
  }
  out.warps_per_sm = out.blocks_per_sm * warps_per_block;
  out.sms_needed = (launch.grid_blocks + out.blocks_per_sm - 1) / out.blocks_per_sm;
  return out;
}

SmShare resident_share(const LaunchConfig& launch, const DeviceSpec& device) {
  const Occupancy occupancy = compute_occupancy(launch, device);
  const BlockNeeds block = block_needs(launch, device);
  const double blocks = static_cast<double>(std::min<std::int64_t>(occupancy.blocks_per_sm, launch.grid_blocks));
  const double warps = blocks * block.warps;
  return {
      std::max(warps / device.max_warps_per_sm, warps * device.warp_size / device.max_threads_per_sm),
      warps * static_cast<double>(block.regs_per_warp) / device.registers_per_sm,
      device.shared_memory_per_sm > 0 ? blocks * static_cast<double>(block.shared) / device.shared_memory_per_sm : 0.0,
      blocks / device.max_blocks_per_sm};
}

}  // namespace fleet::orion
