// GPU device tables for occupancy and roofline: per-SM limits, SM count,
// peak compute and memory bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fleet::orion {

/// Limits and peaks of one GPU model (values from NVIDIA's data sheets and
/// CUDA occupancy tables for its compute capability).
struct DeviceSpec {
  std::string name;            ///< canonical name, e.g. "a100-40"
  std::string description;     ///< e.g. "NVIDIA A100-SXM4-40GB"
  int compute_capability = 0;  ///< 70, 80, 90
  int sm_count = 0;
  int warp_size = 32;
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 2048;
  int max_warps_per_sm = 64;
  int max_blocks_per_sm = 32;
  int registers_per_sm = 65536;
  int max_registers_per_thread = 255;
  int register_alloc_unit = 256;             ///< registers are allocated per warp in these units
  int shared_memory_per_sm = 0;              ///< bytes usable by blocks on one SM
  int max_shared_memory_per_block = 0;       ///< bytes, with the opt-in carve-out
  int shared_memory_alloc_unit = 0;          ///< allocation granularity in bytes
  int reserved_shared_memory_per_block = 0;  ///< bytes the runtime reserves per block (sm_80+: 1 KiB)
  double peak_fp32_flops = 0;                ///< FLOP/s without tensor cores
  double peak_tensor_flops = 0;              ///< dense FP16/BF16 tensor-core FLOP/s
  double memory_bandwidth = 0;               ///< bytes/s of DRAM/HBM
  std::uint64_t memory_bytes = 0;

  /// Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound
  /// on the CUDA cores: peak_fp32_flops / memory_bandwidth.
  double ridge_point() const { return peak_fp32_flops / memory_bandwidth; }
};

/// Every known device.
const std::vector<DeviceSpec>& known_devices();
/// Looks a device up by name, case-insensitively, with aliases ("v100",
/// "V100-16", "a100" = a100-40, "h100", "h200"); InputError listing the
/// known names otherwise.
const DeviceSpec& device_by_name(std::string_view name);

}  // namespace fleet::orion
