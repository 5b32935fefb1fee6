// How many blocks of a launch fit on one SM, and so how many SMs the launch
// needs at full occupancy: SMs = ceil(grid blocks / blocks per SM).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "orion/device_spec.h"

namespace fleet::orion {

/// The parts of a kernel launch that decide occupancy.
struct LaunchConfig {
  std::int64_t grid_blocks = 1;  ///< gridDim.x * gridDim.y * gridDim.z
  int threads_per_block = 1;     ///< blockDim.x * blockDim.y * blockDim.z
  int registers_per_thread = 0;  ///< 0 when unknown: no register limit applied
  std::int64_t static_shared_bytes = 0;
  std::int64_t dynamic_shared_bytes = 0;
};

/// Which per-SM resource bounds the blocks per SM.
enum class OccupancyLimiter { kBlocks, kThreads, kRegisters, kSharedMemory };

/// Name of a limiter ("blocks", "threads", "registers", "shared memory").
std::string_view limiter_name(OccupancyLimiter limiter);

/// Result of the occupancy calculation.
struct Occupancy {
  int blocks_per_sm = 0;                                 ///< resident blocks per SM
  OccupancyLimiter limiter = OccupancyLimiter::kBlocks;  ///< the tightest limit
  int warps_per_sm = 0;                                  ///< resident warps per SM
  std::int64_t sms_needed = 0;  ///< ceil(grid / blocks_per_sm); may exceed the SM count (several waves)
};

/// Fractions of one SM's warps, registers, shared memory and block slots
/// that a kernel's resident blocks hold on it (each in [0, 1]).
using SmShare = std::array<double, 4>;

/// What one SM's worth of a launch (min(blocks per SM, grid) resident
/// blocks) holds of the SM's warps, registers, shared memory and block slots.
/// Registers count 0 when unknown. InputError as compute_occupancy.
SmShare resident_share(const LaunchConfig& launch, const DeviceSpec& device);

/// Blocks per SM = min of the block, thread/warp, register (allocated per
/// warp in units of register_alloc_unit) and shared-memory (static + dynamic
/// + per-block reservation, rounded to the allocation unit) limits.
/// InputError when the launch cannot run on `device` at all.
Occupancy compute_occupancy(const LaunchConfig& launch, const DeviceSpec& device);

}  // namespace fleet::orion
