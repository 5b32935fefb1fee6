// Summary statistics with percentiles (linear interpolation, as numpy's default).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace fleet {

/// Count, moments, extremes and the percentiles reports use.
struct Summary {
  std::size_t count = 0;
  double mean = 0;
  double stddev = 0;  ///< sample standard deviation (n - 1); 0 for fewer than 2 values
  double min = 0;
  double max = 0;
  double p50 = 0;
  double p90 = 0;
  double p95 = 0;
  double p99 = 0;
};

/// The q-th percentile (0..100) of sorted values, interpolating linearly
/// between closest ranks; InputError for empty input or q outside [0, 100].
double percentile_of_sorted(std::span<const double> sorted, double q);
/// Same, sorting a copy first.
double percentile(std::span<const double> values, double q);
/// Summary of `values` (all zero for an empty input). NaNs are rejected.
Summary summarize(std::span<const double> values);

}  // namespace fleet
