// Seconds since a steady-clock instant: what timings, metrics and logs report.
#pragma once

#include <chrono>

namespace fleet {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace fleet
