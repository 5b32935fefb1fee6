#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "common/stats.h"

namespace fleet {
namespace {

TEST(Stats, PercentilesInterpolateLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], q) = 1.75, 2.5, 3.97 for q = 25, 50, 99.
  const std::vector<double> v{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 25), 1.75);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile(std::vector<double>{5}, 90), 5);
}

TEST(Stats, SummaryMatchesHandComputedValues) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  const Summary s = summarize(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_NEAR(s.stddev, 29.011491975882016, 1e-12);  // sqrt(sum((i - 50.5)^2) / 99)
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.p50, 50.5);
  EXPECT_DOUBLE_EQ(s.p90, 90.1);
  EXPECT_DOUBLE_EQ(s.p95, 95.05);
  EXPECT_DOUBLE_EQ(s.p99, 99.01);
}

TEST(Stats, StableForLargeOffsets) {
  const std::vector<double> v{1e9 + 1, 1e9 + 2, 1e9 + 3};
  EXPECT_NEAR(summarize(v).stddev, 1.0, 1e-9);
}

TEST(Stats, EdgeCases) {
  EXPECT_EQ(summarize(std::vector<double>{}).count, 0u);
  EXPECT_EQ(summarize(std::vector<double>{3}).stddev, 0.0);
  EXPECT_THROW(percentile(std::vector<double>{}, 50), InputError);
  EXPECT_THROW(percentile(std::vector<double>{1}, 101), InputError);
  EXPECT_THROW(summarize(std::vector<double>{1, NAN}), InputError);
}

}  // namespace
}  // namespace fleet
