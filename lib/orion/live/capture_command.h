// `orion-profile capture`: runs a program with the CUPTI injection library
// (liborion_capture.so, loaded by the CUDA driver through
// CUDA_INJECTION64_PATH), then turns the kernel records into a profile.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "orion/capture.h"

namespace fleet::orion::live {

/// Options of `orion-profile capture`.
struct CaptureCommandOptions {
  std::filesystem::path output;  ///< profile CSV
  CaptureOptions conversion;
  std::optional<std::filesystem::path> from_records;  ///< convert this records file instead of running
  std::optional<std::filesystem::path> keep_records;  ///< also keep the raw records here
  std::vector<std::string> command;                   ///< program and arguments
};

/// Captures (or converts) and writes the profile; returns the exit code.
int run_capture(const CaptureCommandOptions& options);

}  // namespace fleet::orion::live
