#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

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

TEST(Stats, UnfinishedValuesRaiseTheFiguresOnlyAsFarAsTheyProve) {
  // Twenty requests of 1 ms done, one still waiting after 49 ms: with it,
  // the p99 of the 21 (rank 19.8) is at least 1 + 0.8 x 48 = 39.4 ms and
  // the mean at least 69 / 21 ms; the p95 (rank 19) stays 1 ms.
  const std::vector<double> done(20, 1.0);
  const Summary s = summarize_with_lower_bounds(done, std::vector<double>{49.0});
  EXPECT_NEAR(s.p99, 39.4, 1e-9);
  EXPECT_DOUBLE_EQ(s.mean, 69.0 / 21.0);
  EXPECT_DOUBLE_EQ(s.p95, 1.0);
  EXPECT_EQ(s.count, 20u);
  EXPECT_DOUBLE_EQ(s.max, 1.0);
  // Requests that have just started prove nothing: the figures stay those
  // of the finished ones instead of being pulled down by the short ages.
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  const Summary plain = summarize(hundred);
  const Summary young = summarize_with_lower_bounds(hundred, std::vector<double>{0.5, 2.0});
  EXPECT_DOUBLE_EQ(young.mean, plain.mean);
  EXPECT_DOUBLE_EQ(young.p50, plain.p50);
  EXPECT_DOUBLE_EQ(young.p99, plain.p99);
  // Whatever the values, each figure lies between the whole sample's with
  // the unfinished ones at their bounds and with them never ending.
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 40) / 16777216.0;  // [0, 1), the same on every machine
  };
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> observed, bounds;
    const int n = 1 + static_cast<int>(next() * 30), m = static_cast<int>(next() * 5);
    for (int i = 0; i < n; ++i) observed.push_back(100 * next());
    for (int i = 0; i < m; ++i) bounds.push_back(200 * next());
    std::vector<double> low = observed, high = observed;
    low.insert(low.end(), bounds.begin(), bounds.end());
    high.insert(high.end(), bounds.size(), 1e12);
    const Summary r = summarize_with_lower_bounds(observed, bounds), lo = summarize(low), hi = summarize(high);
    for (auto [v, a, b] : {std::tuple{r.p50, lo.p50, hi.p50}, std::tuple{r.p95, lo.p95, hi.p95},
                           std::tuple{r.p99, lo.p99, hi.p99}, std::tuple{r.mean, lo.mean, hi.mean}}) {
      EXPECT_GE(v, a);
      EXPECT_LE(v, b);
    }
  }
}

}  // namespace
}  // namespace fleet
