#include "orion/offered_load.h"

#include <algorithm>
#include <cmath>

namespace fleet::orion {

double offered_load(std::span<const double> done_us, std::span<const double> latencies_ms) {
  const std::size_t n = std::min(done_us.size(), latencies_ms.size());
  if (n < 3) return -1;
  auto arrival_us = [&](std::size_t i) { return done_us[i] - 1000.0 * latencies_ms[i]; };
  const double span_us = arrival_us(n - 1) - arrival_us(0);
  if (!(span_us > 0)) return -1;
  double service_us = 0;
  for (std::size_t i = 1; i < n; ++i) service_us += done_us[i] - std::max(arrival_us(i), done_us[i - 1]);
  const double rate_per_us = static_cast<double>(n - 1) / span_us;
  return rate_per_us * service_us / static_cast<double>(n - 1);
}

bool overloaded_beyond_chance(double offered_load, std::int64_t requests) {
  if (requests < 6 || !(offered_load > 1)) return false;
  return offered_load * (1.0 - 2.0 / std::sqrt(static_cast<double>(requests - 1))) > 1.0;
}

}  // namespace fleet::orion
