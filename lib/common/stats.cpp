#include "common/stats.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace fleet {

double percentile_of_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) throw InputError("percentile of an empty set");
  if (!(q >= 0.0 && q <= 100.0)) throw InputError("percentile " + std::to_string(q) + " is outside [0, 100]");
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

double percentile(std::span<const double> values, double q) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return percentile_of_sorted(sorted, q);
}

Summary summarize(std::span<const double> values) {
  Summary s;
  if (values.empty()) return s;
  std::vector<double> sorted(values.begin(), values.end());
  for (double v : sorted) {
    if (std::isnan(v)) throw InputError("cannot summarize NaN values");
  }
  std::sort(sorted.begin(), sorted.end());
  s.count = sorted.size();
  // Welford's update keeps the variance accurate for large, close values.
  double mean = 0, m2 = 0;
  std::size_t n = 0;
  for (double v : sorted) {
    ++n;
    const double delta = v - mean;
    mean += delta / static_cast<double>(n);
    m2 += delta * (v - mean);
  }
  s.mean = mean;
  s.stddev = n > 1 ? std::sqrt(m2 / static_cast<double>(n - 1)) : 0.0;
  s.min = sorted.front();
  s.max = sorted.back();
  s.p50 = percentile_of_sorted(sorted, 50);
  s.p90 = percentile_of_sorted(sorted, 90);
  s.p95 = percentile_of_sorted(sorted, 95);
  s.p99 = percentile_of_sorted(sorted, 99);
  return s;
}

Summary summarize_with_lower_bounds(std::span<const double> observed, std::span<const double> lower_bounds) {
  Summary s = summarize(observed);
  if (lower_bounds.empty() || observed.empty()) return s;
  // Every figure reported (mean, interpolated percentiles) is monotone in
  // each value, so with the unfinished values at their bounds it is a
  // lower bound of the whole sample's; the observed-only figure is never
  // above the whole sample's with the unfinished values at infinity.
  std::vector<double> all(observed.begin(), observed.end());
  all.insert(all.end(), lower_bounds.begin(), lower_bounds.end());
  const Summary bound = summarize(all);
  s.mean = std::max(s.mean, bound.mean);
  s.p50 = std::max(s.p50, bound.p50);
  s.p90 = std::max(s.p90, bound.p90);
  s.p95 = std::max(s.p95, bound.p95);
  s.p99 = std::max(s.p99, bound.p99);
  return s;
}

}  // namespace fleet
