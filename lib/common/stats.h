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

/// Summary of a sample in which some values are known only from below
/// (requests still in progress when a measurement window closed, by their
/// age then). Each figure is the one of `observed`, raised where needed to
/// the least value the whole sample can have: that of `observed` together
/// with `lower_bounds`. It so never falls below what the unfinished values
/// already prove, and is unchanged when they are not that long (an
/// unfinished value counted at its bound would pull the figures down).
/// count, stddev, min and max are those of `observed`; NaNs are rejected.
Summary summarize_with_lower_bounds(std::span<const double> observed, std::span<const double> lower_bounds);

}  // namespace fleet
