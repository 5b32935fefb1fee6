#include "common/prometheus.h"

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "common/error.h"

namespace fleet {
namespace {

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string label_text(const MetricLabels& labels, const std::string& extra_name = "", const std::string& extra = "") {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += (first ? "" : ",") + k + "=\"" + escape_label(v) + "\"";
    first = false;
  }
  if (!extra_name.empty()) out += (first ? "" : ",") + extra_name + "=\"" + extra + "\"";
  return out + "}";
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

}  // namespace

void MetricsRegistry::declare(const std::string& name, const std::string& help, Kind kind, std::vector<double> bounds) {
  std::lock_guard lock(mutex_);
  if (find(name)) throw UsageError("metric '" + name + "' declared twice");
  families_.push_back(Family{name, help, kind, std::move(bounds), {}, {}});
}

void MetricsRegistry::counter(const std::string& name, const std::string& help) {
  declare(name, help, Kind::kCounter, {});
}
void MetricsRegistry::gauge(const std::string& name, const std::string& help) { declare(name, help, Kind::kGauge, {}); }
void MetricsRegistry::histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  for (std::size_t i = 1; i < bounds.size(); ++i)
    if (!(bounds[i] > bounds[i - 1])) throw UsageError("histogram '" + name + "': bucket bounds must increase");
  declare(name, help, Kind::kHistogram, std::move(bounds));
}

const MetricsRegistry::Family* MetricsRegistry::find(const std::string& name) const {
  for (const auto& f : families_)
    if (f.name == name) return &f;
  return nullptr;
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name) {
  for (auto& f : families_)
    if (f.name == name) return f;
  throw UsageError("metric '" + name + "' was not declared");
}

void MetricsRegistry::add(const std::string& name, double value, const MetricLabels& labels) {
  std::lock_guard lock(mutex_);
  family(name).values[labels] += value;
}

void MetricsRegistry::set(const std::string& name, double value, const MetricLabels& labels) {
  std::lock_guard lock(mutex_);
  family(name).values[labels] = value;
}

void MetricsRegistry::observe(const std::string& name, double value, const MetricLabels& labels) {
  std::lock_guard lock(mutex_);
  auto& f = family(name);
  auto& h = f.histograms[labels];
  if (h.counts.empty()) h.counts.assign(f.bounds.size() + 1, 0.0);
  std::size_t bucket = 0;
  while (bucket < f.bounds.size() && value > f.bounds[bucket]) ++bucket;
  h.counts[bucket] += 1;
  h.sum += value;
  h.count += 1;
}

double MetricsRegistry::value(const std::string& name, const MetricLabels& labels) const {
  std::lock_guard lock(mutex_);
  const auto* f = find(name);
  if (!f) return 0;
  auto it = f->values.find(labels);
  return it == f->values.end() ? 0.0 : it->second;
}

void MetricsRegistry::clear(const std::string& name) {
  std::lock_guard lock(mutex_);
  Family& f = family(name);
  f.values.clear();
  f.histograms.clear();
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  for (const auto& f : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter" : f.kind == Kind::kGauge ? "gauge" : "histogram";
    // Counters are exposed under their _total name, HELP and TYPE included, as
    // Prometheus's own clients write them.
    const std::string exposed = f.name + (f.kind == Kind::kCounter ? "_total" : "");
    out << "# HELP " << exposed << " " << f.help << "\n# TYPE " << exposed << " " << type << "\n";
    if (f.kind == Kind::kHistogram) {
      for (const auto& [labels, h] : f.histograms) {
        double cumulative = 0;
        for (std::size_t b = 0; b < h.counts.size(); ++b) {
          cumulative += h.counts[b];
          const auto le = b < f.bounds.size() ? number(f.bounds[b]) : std::string("+Inf");
          out << f.name << "_bucket" << label_text(labels, "le", le) << " " << number(cumulative) << "\n";
        }
        out << f.name << "_sum" << label_text(labels) << " " << number(h.sum) << "\n";
        out << f.name << "_count" << label_text(labels) << " " << number(h.count) << "\n";
      }
    } else {
      const std::string suffix = f.kind == Kind::kCounter ? "_total" : "";
      for (const auto& [labels, v] : f.values)
        out << f.name << suffix << label_text(labels) << " " << number(v) << "\n";
    }
  }
  return out.str();
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i, start *= factor) out.push_back(start);
  return out;
}

}  // namespace fleet
