// Metrics in the Prometheus text exposition format (version 0.0.4):
// counters, gauges and histograms with labels, rendered for GET /metrics.
// Thread-safe; updates take one mutex (they happen per request or per
// scheduler step, not per element).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fleet {

/// Label name/value pairs of one series, e.g. {{"model", "ft-copy"}}.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  /// Declares a metric family (name without the _total / _bucket suffixes).
  void counter(const std::string& name, const std::string& help);
  void gauge(const std::string& name, const std::string& help);
  /// `bounds`: upper bounds of the buckets, increasing (+Inf is implied).
  void histogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  void add(const std::string& name, double value, const MetricLabels& labels = {});
  void set(const std::string& name, double value, const MetricLabels& labels = {});
  void observe(const std::string& name, double value, const MetricLabels& labels = {});
  /// Drops every series of a family (a gauge whose labels describe a state
  /// that has changed).
  void clear(const std::string& name);
  /// Current value of a counter or gauge series (0 when never touched).
  double value(const std::string& name, const MetricLabels& labels = {}) const;

  /// Every family in declaration order, in the text format.
  std::string render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Histogram {
    std::vector<double> counts;  ///< per bucket (not cumulative), last is +Inf
    double sum = 0, count = 0;
  };
  struct Family {
    std::string name, help;
    Kind kind;
    std::vector<double> bounds;
    std::map<MetricLabels, double> values;
    std::map<MetricLabels, Histogram> histograms;
  };
  Family& family(const std::string& name);
  const Family* find(const std::string& name) const;
  void declare(const std::string& name, const std::string& help, Kind kind, std::vector<double> bounds);

  mutable std::mutex mutex_;
  std::vector<Family> families_;
};

/// Exponential bucket bounds: start, start·factor, ... (count of them).
std::vector<double> exponential_buckets(double start, double factor, int count);

}  // namespace fleet
